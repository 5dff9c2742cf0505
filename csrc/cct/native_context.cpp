#include "native_context.h"

#include <atomic>
#include <cstdio>
#include <string>
#include <unordered_map>

#include "../callpath/native_stack.h"

namespace dc {
namespace {

std::atomic<uint64_t> g_mismatches{0};

// Per unique return address: is it an operator's `at::_ops::<op>::call` frame, and which op.
// Symbolizing costs microseconds, once per address; the tree lock guards the map.
struct OpCallInfo {
  bool call = false;
  std::string op;
};
auto& g_op_calls = *new std::unordered_map<uintptr_t, OpCallInfo>();  // never destroyed

const OpCallInfo& op_call(uintptr_t ip) {
  auto it = g_op_calls.find(ip);
  if (it != g_op_calls.end()) return it->second;
  OpCallInfo info;
  native::Symbol sym = native::symbolize(ip);
  info.call = native::op_call_frame(sym, &info.op);
  return g_op_calls.emplace(ip, std::move(info)).first->second;
}

// Sampled instructions, keyed by their function: ip -> frame id (never destroyed).
auto& g_leaf_frames = *new std::unordered_map<uintptr_t, uint32_t>();

uint32_t leaf_function_frame(Tree& t, uintptr_t pc) {
  auto it = g_leaf_frames.find(pc);
  if (it != g_leaf_frames.end()) return it->second;
  native::Symbol sym = native::symbolize(pc, /*return_address=*/false);
  std::string name = sym.resolved ? sym.name : "<code without symbols>";
  uint32_t id = t.native_function_frame(name, sym.library);
  g_leaf_frames.emplace(pc, id);
  return id;
}

uint32_t native_frame_at(Tree& t, const uintptr_t* ips, int i, bool leaf_is_pc) {
  return (leaf_is_pc && i == 0) ? leaf_function_frame(t, ips[0]) : t.native_frame(ips[i]);
}

bool is_call_of(uintptr_t ip, const char* op_name) {
  const OpCallInfo& c = op_call(ip);
  return c.call && native::op_name_matches(c.op, op_name);
}

// Innermost-first index of `op_name`'s call frame among ips[0, limit), or -1.
int find_call(const uintptr_t* ips, int limit, const char* op_name) {
  for (int i = 0; i < limit; ++i)
    if (is_call_of(ips[i], op_name)) return i;
  return -1;
}

}  // namespace

NativePlace place_top_level(Tree& t, const uintptr_t* ips, int n_ips, const dc_raw_frame* py,
                            int n_py, const PythonFrameFn& py_frame, const char* op_name,
                            bool leaf_is_pc) {
  NativePlace out;
  native::SpliceStatus status;
  native::SpliceOptions opts;
  opts.native_truncated = n_ips >= kMaxNative;
  opts.python_truncated = n_py >= 256;
  std::vector<native::SpliceItem> items = native::splice(ips, n_ips, py, n_py, &status, opts);
  if (status == native::SpliceStatus::kMismatch) {
    g_mismatches.fetch_add(1, std::memory_order_relaxed);
    return out;
  }
  size_t end = items.size();
  int call_ip_index = -1;
  if (op_name != nullptr) {
    // The op node replaces its own call frame; the dispatcher frames inside it are dropped.
    call_ip_index = find_call(ips, n_ips, op_name);
    end = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].python && call_ip_index >= 0 && items[i].ip == ips[call_ip_index]) {
        end = i;
        break;
      }
      // Without a matching call frame, keep the path down to the innermost Python frame.
      if (items[i].python) end = i + 1;
    }
  }
  uint32_t node = 0;
  for (size_t i = 0; i < end; ++i) {
    const native::SpliceItem& it = items[i];
    uint32_t frame = it.python ? py_frame(it.py_index)
                     : (leaf_is_pc && it.ip == ips[0]) ? leaf_function_frame(t, it.ip)
                                                       : t.native_frame(it.ip);
    node = t.child(node, frame);
    if (it.python) out.py_node = node;
  }
  out.node = node;
  out.cut = call_ip_index >= 0 ? n_ips - 1 - call_ip_index : -1;
  out.spliced = true;
  return out;
}

NativePlace place_nested(Tree& t, uint32_t outer_node, int outer_cut, const uintptr_t* ips,
                         int n_ips, const char* op_name, bool leaf_is_pc) {
  NativePlace out;
  out.node = outer_node;
  if (outer_cut < 0 || n_ips <= 0) return out;
  if (outer_cut >= n_ips) {
    if (op_name != nullptr || !leaf_is_pc) return out;
    // The unwind stopped short of the operator's own frame: keep what is certain.
    uint32_t marker = t.child(outer_node, t.named_frame(Kind::Marker, "<native unwind incomplete>"));
    out.node = t.child(marker, leaf_function_frame(t, ips[0]));
    out.cut = outer_cut;
    out.spliced = true;
    return out;
  }
  // Frames inside the outer operator are ips[0, inside) (innermost first).
  int inside = n_ips - 1 - outer_cut;
  int stop = -1;  // innermost-first index where the kept frames end (exclusive)
  if (op_name != nullptr) {
    stop = find_call(ips, inside, op_name);
    if (stop < 0) return out;  // no call frame of its own: nest it without native frames
  }
  uint32_t node = outer_node;
  for (int i = inside - 1; i > stop; --i) node = t.child(node, native_frame_at(t, ips, i, leaf_is_pc));
  out.node = node;
  out.cut = op_name != nullptr ? n_ips - 1 - stop : outer_cut;
  out.spliced = true;
  return out;
}

uint32_t place_native_only(Tree& t, uint32_t base, const uintptr_t* ips, int n_ips,
                           bool leaf_is_pc) {
  uint32_t node = base;
  for (int i = n_ips - 1; i >= 0; --i) node = t.child(node, native_frame_at(t, ips, i, leaf_is_pc));
  return node;
}

void describe_native_frames(Tree& t) {
  for (size_t i = t.natives_described_upto; i < t.frames.size(); ++i) {
    NativeFrame& f = t.frames[i];
    if (f.kind != Kind::Native || f.described) continue;
    native::Symbol sym = native::symbolize(f.ip);
    f.name = sym.name;
    f.file = sym.library;
    char offset[32];
    std::snprintf(offset, sizeof(offset), "0x%llx", static_cast<unsigned long long>(sym.offset));
    f.extra = std::string("offset=") + offset;
    if (!sym.file.empty()) f.extra += ";source=" + sym.file + ":" + std::to_string(sym.line);
    f.described = true;
  }
  t.natives_described_upto = t.frames.size();
}

uint64_t splice_mismatches() { return g_mismatches.load(); }

}  // namespace dc
