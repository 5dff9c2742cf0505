#include "tree.h"

#include <atomic>

namespace dc {

const char* kind_name(Kind k) {
  static const char* names[] = {"root", "python", "op", "native", "kernel", "memcpy",
                                "memset", "sync", "marker", "thread", "module", "instruction",
                                "hook"};
  auto i = static_cast<size_t>(k);
  return i < sizeof(names) / sizeof(names[0]) ? names[i] : "marker";
}

Tree::Tree() {
  frames.push_back(NativeFrame{Kind::Root, "<root>", "", 0, "", true});
  nodes.push_back(TreeNode{UINT32_MAX, 0, {}});
}

namespace {
constexpr size_t kKnownSlots = 1 << 18;
std::atomic<uint64_t> g_known[kKnownSlots];

uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  return h ^ (h >> 33);
}

void remember_key(uint64_t key) {
  for (size_t i = 0; i < kKnownSlots; ++i) {
    auto& slot = g_known[(key + i) % kKnownSlots];
    uint64_t cur = slot.load(std::memory_order_relaxed);
    if (cur == key) return;
    if (cur == 0 && slot.compare_exchange_strong(cur, key)) return;
    if (cur == key) return;
  }
}
}  // namespace

uint64_t python_key(const dc_raw_frame& f) {
  uint64_t h = mix(reinterpret_cast<uint64_t>(f.code) ^ (static_cast<uint64_t>(f.offset) << 40));
  h = mix(h ^ reinterpret_cast<uint64_t>(f.filename) ^ static_cast<uint64_t>(f.firstlineno) << 20);
  h = mix(h ^ reinterpret_cast<uint64_t>(f.name));
  return h ? h : 1;  // 0 marks an empty slot
}

bool known_python_key(uint64_t key) {
  for (size_t i = 0; i < kKnownSlots; ++i) {
    uint64_t cur = g_known[(key + i) % kKnownSlots].load(std::memory_order_acquire);
    if (cur == key) return true;
    if (cur == 0) return false;
  }
  return false;
}

uint32_t Tree::python_frame(const dc_raw_frame& f, bool live, const CodeInfo* info) {
  uint64_t k = python_key(f);
  auto it = py_index_.find(k);
  uint32_t id;
  if (it != py_index_.end()) {
    id = it->second;
    if (frames[id].described) return id;
  } else {
    id = static_cast<uint32_t>(frames.size());
    NativeFrame nf{Kind::Python};
    nf.described = false;
    nf.name = "<python frame not yet described>";
    frames.push_back(std::move(nf));
    py_index_.emplace(k, id);
  }
  NativeFrame& nf = frames[id];
  if (live) {
    CodeInfo ci;
    ci.line = dc_describe_code(f.code, f.offset, ci.file, sizeof(ci.file), ci.name, sizeof(ci.name));
    info = &ci;
    nf.file = ci.file;
    nf.name = ci.name;
    nf.line = ci.line;
  } else if (info != nullptr) {
    nf.file = info->file;
    nf.name = info->name;
    nf.line = info->line;
  } else {
    return id;
  }
  nf.described = true;
  remember_key(k);
  return id;
}

uint32_t Tree::named_frame(Kind kind, const std::string& name, const std::string& extra) {
  std::string k;
  k.reserve(name.size() + extra.size() + 2);
  k.push_back(static_cast<char>(kind));
  k.append(name).push_back('\0');
  k.append(extra);
  auto it = named_index_.find(k);
  if (it != named_index_.end()) return it->second;
  auto id = static_cast<uint32_t>(frames.size());
  frames.push_back(NativeFrame{kind, name, "", 0, extra, true});
  named_index_.emplace(std::move(k), id);
  return id;
}

uint32_t Tree::native_frame(uintptr_t ip) {
  auto it = native_index_.find(ip);
  if (it != native_index_.end()) return it->second;
  auto id = static_cast<uint32_t>(frames.size());
  NativeFrame f{Kind::Native};
  f.ip = ip;
  f.described = false;
  frames.push_back(std::move(f));
  native_index_.emplace(ip, id);
  return id;
}

uint32_t Tree::native_function_frame(const std::string& name, const std::string& library) {
  uint32_t id = named_frame(Kind::Native, name, "library=" + library);
  frames[id].file = library;
  frames[id].extra.clear();
  return id;
}

uint32_t Tree::child(uint32_t parent, uint32_t frame) {
  uint64_t k = (static_cast<uint64_t>(parent) << 32) | frame;
  auto it = child_index_.find(k);
  if (it != child_index_.end()) return it->second;
  auto id = static_cast<uint32_t>(nodes.size());
  nodes.push_back(TreeNode{parent, frame, {}});
  child_index_.emplace(k, id);
  return id;
}

void Tree::add(uint32_t node, uint32_t metric, double v) {
  auto& m = nodes[node].metrics;
  if (m.size() <= metric) m.resize(metric + 1, 0.0);
  m[metric] += v;
}

uint32_t Tree::metric_id(const std::string& name) {
  std::lock_guard<std::mutex> g(mu);
  auto it = metric_index_.find(name);
  if (it != metric_index_.end()) return it->second;
  auto id = static_cast<uint32_t>(metric_names.size());
  metric_names.push_back(name);
  metric_index_.emplace(name, id);
  return id;
}

Tree& tree() {
  static Tree* t = new Tree();  // never destroyed: callbacks may run during interpreter exit
  return *t;
}

}  // namespace dc
