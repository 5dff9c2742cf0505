#include "tree.h"

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "../callpath/native_stack.h"

namespace dc {

const char* kind_name(Kind k) {
  static const char* names[] = {"root", "python", "op", "native", "kernel", "memcpy",
                                "memset", "sync", "marker", "thread", "module", "instruction",
                                "hook"};
  auto i = static_cast<size_t>(k);
  return i < sizeof(names) / sizeof(names[0]) ? names[i] : "marker";
}

namespace {
constexpr size_t kKnownSlots = 1 << 18;
constexpr size_t kKnownProbes = 32;  // bounded: a full table costs the handler 32 loads, not 2^18
std::atomic<uint64_t> g_known[kKnownSlots];

uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  return h ^ (h >> 33);
}

void remember_key(uint64_t key) {
  for (size_t i = 0; i < kKnownProbes; ++i) {
    auto& slot = g_known[(key + i) % kKnownSlots];
    uint64_t cur = slot.load(std::memory_order_relaxed);
    if (cur == key) return;
    if (cur == 0 && slot.compare_exchange_strong(cur, key)) return;
    if (cur == key) return;
  }
}

std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}
}  // namespace

uint64_t python_key(const dc_raw_frame& f, uint64_t fingerprint) {
  uint64_t h = mix(reinterpret_cast<uint64_t>(f.code) ^ (static_cast<uint64_t>(f.offset) << 40));
  h = mix(h ^ reinterpret_cast<uint64_t>(f.filename) ^ static_cast<uint64_t>(f.firstlineno) << 20);
  h = mix(h ^ reinterpret_cast<uint64_t>(f.name));
  h = mix(h ^ fingerprint);
  return h ? h : 1;  // 0 marks an empty slot
}

bool known_python_key(uint64_t key) {
  for (size_t i = 0; i < kKnownProbes; ++i) {
    uint64_t cur = g_known[(key + i) % kKnownSlots].load(std::memory_order_acquire);
    if (cur == key) return true;
    if (cur == 0) return false;
  }
  return false;
}

Tree::Tree() : text_file_(new char[DC_MAX_CODE_TEXT]), text_name_(new char[DC_MAX_CODE_TEXT]) {
  frames_.push_back(Frame{Kind::Root, "<root>", "", "", 0, true, 0});
  nodes_.push_back(Node{UINT32_MAX, 0, {}});
}

TreeWriter::TreeWriter(Tree& t) : t_(t), lock_(t.mu_) {}

uint32_t TreeWriter::python_frame(const dc_raw_frame& f, bool live, const CodeText* info,
                                  uint64_t key) {
  if (key == 0) key = python_key(f, dc_code_fingerprint(f.code, 0));
  auto it = t_.py_index_.find(key);
  uint32_t id;
  if (it != t_.py_index_.end()) {
    id = it->second;
    if (t_.frames_[id].described) return id;
  } else {
    id = static_cast<uint32_t>(t_.frames_.size());
    Tree::Frame nf{Kind::Python};
    nf.described = false;
    nf.name = "<python frame not yet described>";
    t_.frames_.push_back(std::move(nf));
    t_.py_index_.emplace(key, id);
  }
  Tree::Frame& nf = t_.frames_[id];
  if (live) {
    // Whole paths, however long (Bazel and CI trees pass 160 bytes easily); the buffers are
    // the tree's, guarded by its lock.
    nf.line = dc_describe_code(f.code, f.offset, t_.text_file_, DC_MAX_CODE_TEXT, t_.text_name_,
                               DC_MAX_CODE_TEXT);
    nf.file = t_.text_file_;
    nf.name = t_.text_name_;
  } else if (info != nullptr) {
    nf.file = info->file;
    nf.name = info->name;
    nf.line = info->line;
  } else {
    return id;
  }
  nf.described = true;
  remember_key(key);
  return id;
}

uint32_t TreeWriter::named_frame(Kind kind, const std::string& name, const std::string& extra) {
  std::string k;
  k.reserve(name.size() + extra.size() + 2);
  k.push_back(static_cast<char>(kind));
  k.append(name).push_back('\0');
  k.append(extra);
  auto it = t_.named_index_.find(k);
  if (it != t_.named_index_.end()) return it->second;
  auto id = static_cast<uint32_t>(t_.frames_.size());
  t_.frames_.push_back(Tree::Frame{kind, name, "", extra, 0, true, 0});
  t_.named_index_.emplace(std::move(k), id);
  return id;
}

uint32_t TreeWriter::native_frame(uintptr_t ip) {
  auto it = t_.native_index_.find(ip);
  if (it != t_.native_index_.end()) return it->second;
  auto id = static_cast<uint32_t>(t_.frames_.size());
  Tree::Frame f{Kind::Native};
  f.ip = ip;
  f.described = false;
  t_.frames_.push_back(std::move(f));
  t_.native_index_.emplace(ip, id);
  return id;
}

uint32_t TreeWriter::native_function_frame(const std::string& name, const std::string& library) {
  uint32_t id = named_frame(Kind::Native, name, "library=" + library);
  t_.frames_[id].file = library;
  t_.frames_[id].extra.clear();
  return id;
}

uint32_t TreeWriter::child(uint32_t parent, uint32_t frame) {
  uint64_t k = (static_cast<uint64_t>(parent) << 32) | frame;
  auto it = t_.child_index_.find(k);
  if (it != t_.child_index_.end()) return it->second;
  auto id = static_cast<uint32_t>(t_.nodes_.size());
  t_.nodes_.push_back(Tree::Node{parent, frame, {}});
  t_.child_index_.emplace(k, id);
  return id;
}

void TreeWriter::add(uint32_t node, uint32_t metric, double v) {
  if (node >= t_.nodes_.size()) return;
  auto& m = t_.nodes_[node].metrics;
  if (m.size() <= metric) m.resize(metric + 1, 0.0);
  m[metric] += v;
}

bool TreeWriter::has_node(uint32_t node) const { return node < t_.nodes_.size(); }
double TreeWriter::value(uint32_t node, uint32_t metric) const {
  if (node >= t_.nodes_.size()) return 0.0;
  const auto& m = t_.nodes_[node].metrics;
  return metric < m.size() ? m[metric] : 0.0;
}
uint32_t TreeWriter::parent(uint32_t node) const { return t_.nodes_[node].parent; }
uint32_t TreeWriter::frame_of(uint32_t node) const { return t_.nodes_[node].frame; }

std::vector<SnapshotFrame> TreeWriter::path(uint32_t node) const {
  std::vector<SnapshotFrame> out;
  while (node > 0 && node < t_.nodes_.size()) {
    const Tree::Frame& f = t_.frames_[t_.nodes_[node].frame];
    out.push_back(SnapshotFrame{f.kind, f.name, f.file, f.extra, f.line});
    node = t_.nodes_[node].parent;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

uint32_t Tree::metric_id(const std::string& name) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = metric_index_.find(name);
  if (it != metric_index_.end()) return it->second;
  auto id = static_cast<uint32_t>(metric_names_.size());
  metric_names_.push_back(name);
  metric_index_.emplace(name, id);
  return id;
}

void Tree::describe_native_frames() {
  static std::mutex& one_at_a_time = *new std::mutex();
  std::lock_guard<std::mutex> serial(one_at_a_time);
  std::vector<std::pair<size_t, uintptr_t>> todo;
  size_t upto;
  {
    std::lock_guard<std::mutex> g(mu_);
    upto = frames_.size();
    for (size_t i = natives_described_upto_; i < upto; ++i)
      if (frames_[i].kind == Kind::Native && !frames_[i].described) todo.emplace_back(i, frames_[i].ip);
  }
  // Symbolization reads ELF and DWARF files: never under the lock every event path needs.
  std::vector<native::Symbol> syms;
  syms.reserve(todo.size());
  for (const auto& [i, ip] : todo) syms.push_back(native::symbolize(ip));
  std::lock_guard<std::mutex> g(mu_);
  for (size_t k = 0; k < todo.size(); ++k) {
    Frame& f = frames_[todo[k].first];
    const native::Symbol& sym = syms[k];
    f.name = sym.name;
    f.file = sym.library;
    f.extra = "offset=" + hex(sym.offset);
    if (!sym.file.empty()) f.extra += ";source=" + sym.file + ":" + std::to_string(sym.line);
    f.described = true;
  }
  natives_described_upto_ = std::max(natives_described_upto_, upto);
}

Snapshot Tree::snapshot(const std::vector<uint32_t>& keep,
                        const std::vector<std::tuple<uint32_t, uint32_t, double>>& rows) {
  describe_native_frames();
  constexpr uint32_t kOut = UINT32_MAX;
  Snapshot s;
  std::lock_guard<std::mutex> g(mu_);
  const size_t n_nodes = nodes_.size();
  std::vector<uint32_t> dense(n_nodes, kOut);  // tree id -> the snapshot's (0 until numbered)
  for (size_t i = 0; i < n_nodes; ++i) {
    const std::vector<double>& m = nodes_[i].metrics;
    for (size_t k = 0; k < m.size(); ++k)
      if (m[k] != 0.0) {
        s.metrics.emplace_back(static_cast<uint32_t>(i), static_cast<uint32_t>(k), m[k]);
        dense[i] = 0;
      }
  }
  for (const auto& r : rows)  // (zeros, and rows of a node the tree never had, dropped)
    if (std::get<0>(r) < n_nodes && std::get<2>(r) != 0.0) {
      dense[std::get<0>(r)] = 0;
      s.metrics.push_back(r);
    }
  for (uint32_t node : keep)
    if (node < n_nodes) dense[node] = 0;
  if (n_nodes > 0) dense[0] = 0;  // the root
  for (size_t i = n_nodes; i-- > 1;)  // (a parent's id is below its children's)
    if (dense[i] != kOut) dense[nodes_[i].parent] = 0;
  std::vector<uint32_t> frame_at(frames_.size(), kOut);
  for (size_t i = 0; i < n_nodes; ++i) {
    if (dense[i] == kOut) continue;
    dense[i] = static_cast<uint32_t>(s.nodes.size());
    const Node& n = nodes_[i];
    uint32_t& f = frame_at[n.frame];
    if (f == kOut) {
      f = static_cast<uint32_t>(s.frames.size());
      const Frame& fr = frames_[n.frame];
      s.frames.push_back(SnapshotFrame{fr.kind, fr.name, fr.file, fr.extra, fr.line});
    }
    s.nodes.emplace_back(i == 0 ? 0 : dense[n.parent], f);
    s.ids.push_back(static_cast<uint32_t>(i));
  }
  for (auto& r : s.metrics) std::get<0>(r) = dense[std::get<0>(r)];
  s.metric_names = metric_names_;
  return s;
}

size_t Tree::size() {
  std::lock_guard<std::mutex> g(mu_);
  return nodes_.size();
}

void Tree::reset_metrics() {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& n : nodes_) std::fill(n.metrics.begin(), n.metrics.end(), 0.0);
  checkpoint_.clear();
  generation_.fetch_add(1);
}

void Tree::checkpoint_metrics() {
  std::lock_guard<std::mutex> g(mu_);
  checkpoint_.resize(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) checkpoint_[i] = nodes_[i].metrics;
}

void Tree::rollback_metrics() {
  std::lock_guard<std::mutex> g(mu_);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    auto& m = nodes_[i].metrics;
    if (i < checkpoint_.size()) {
      m = checkpoint_[i];
    } else {
      std::fill(m.begin(), m.end(), 0.0);  // a context first seen during the warm-up
    }
  }
  checkpoint_.clear();
  generation_.fetch_add(1);
}

}  // namespace dc
