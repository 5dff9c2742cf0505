#include "native_context.h"

#include <atomic>
#include <cstdio>
#include <string>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "../callpath/native_stack.h"

namespace dc {
namespace {

std::atomic<uint64_t> g_mismatches{0};

// Per unique address, what placing needs from its symbol: is it an operator's
// `at::_ops::<op>::call` frame (and which op), and, for sampled instructions, the function's
// name and library. Filled by native_warm_symbols() outside the tree lock (symbolizing reads
// files); lookups under the tree lock only read the cache. A miss there (a caller that did not
// warm) symbolizes in place: slower, never wrong.
struct OpCallInfo {
  bool call = false;
  std::string op;
};
struct LeafInfo {
  std::string name, library;
};
std::mutex& g_sym_mu = *new std::mutex();  // never destroyed (threads outlive exit)
auto& g_op_calls = *new std::unordered_map<uintptr_t, OpCallInfo>();
auto& g_leaves = *new std::unordered_map<uintptr_t, LeafInfo>();
// Sampled instructions, keyed by their function's frame id: pc -> frame id (tree lock held).
auto& g_leaf_frames = *new std::unordered_map<uintptr_t, uint32_t>();

OpCallInfo make_op_call(uintptr_t ip) {
  OpCallInfo info;
  native::Symbol sym = native::symbolize(ip);
  info.call = native::op_call_frame(sym, &info.op);
  return info;
}

LeafInfo make_leaf(uintptr_t pc) {
  native::Symbol sym = native::symbolize(pc, /*return_address=*/false);
  return LeafInfo{sym.resolved ? sym.name : "<code without symbols>", sym.library};
}

OpCallInfo op_call(uintptr_t ip) {
  {
    std::lock_guard<std::mutex> g(g_sym_mu);
    auto it = g_op_calls.find(ip);
    if (it != g_op_calls.end()) return it->second;
  }
  OpCallInfo info = make_op_call(ip);
  std::lock_guard<std::mutex> g(g_sym_mu);
  return g_op_calls.emplace(ip, std::move(info)).first->second;
}

uint32_t leaf_function_frame(TreeWriter& t, uintptr_t pc) {
  auto it = g_leaf_frames.find(pc);
  if (it != g_leaf_frames.end()) return it->second;
  LeafInfo leaf;
  bool found = false;
  {
    std::lock_guard<std::mutex> g(g_sym_mu);
    auto l = g_leaves.find(pc);
    if (l != g_leaves.end()) {
      leaf = l->second;
      found = true;
    }
  }
  if (!found) leaf = make_leaf(pc);
  uint32_t id = t.native_function_frame(leaf.name, leaf.library);
  g_leaf_frames.emplace(pc, id);
  return id;
}

uint32_t native_frame_at(TreeWriter& t, const uintptr_t* ips, int i, bool leaf_is_pc) {
  return (leaf_is_pc && i == 0) ? leaf_function_frame(t, ips[0]) : t.native_frame(ips[i]);
}

bool is_call_of(uintptr_t ip, const char* op_name) {
  const OpCallInfo c = op_call(ip);
  return c.call && native::op_name_matches(c.op, op_name);
}

// Innermost-first index of `op_name`'s call frame among ips[0, limit), or -1.
int find_call(const uintptr_t* ips, int limit, const char* op_name) {
  for (int i = 0; i < limit; ++i)
    if (is_call_of(ips[i], op_name)) return i;
  return -1;
}

}  // namespace

NativePlace place_top_level(TreeWriter& t, const uintptr_t* ips, int n_ips, const dc_raw_frame* py,
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

NativePlace place_nested(TreeWriter& t, uint32_t outer_node, int outer_cut, const uintptr_t* ips,
                         int n_ips, const char* op_name, bool leaf_is_pc) {
  NativePlace out;
  out.node = outer_node;
  if (outer_cut < 0 || n_ips <= 0) return out;
  if (outer_cut >= n_ips) {
    if (op_name != nullptr || !leaf_is_pc) return out;
    // The unwind stopped short of the operator's own frame: keep what is certain.
    out.node = place_leaf_only(t, outer_node, ips[0]);
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

uint32_t place_leaf_only(TreeWriter& t, uint32_t base, uintptr_t pc) {
  uint32_t marker = t.child(base, t.named_frame(Kind::Marker, "<native unwind incomplete>"));
  return t.child(marker, leaf_function_frame(t, pc));
}

uint32_t place_native_only(TreeWriter& t, uint32_t base, const uintptr_t* ips, int n_ips,
                           bool leaf_is_pc) {
  uint32_t node = base;
  for (int i = n_ips - 1; i >= 0; --i) node = t.child(node, native_frame_at(t, ips, i, leaf_is_pc));
  return node;
}

void native_warm_symbols(const uintptr_t* ips, int n_ips, bool leaf_is_pc) {
  uintptr_t missing[kMaxNative];
  int n_missing = 0;
  bool leaf_missing = false;
  {
    std::lock_guard<std::mutex> g(g_sym_mu);
    // Samples (leaf_is_pc) only need their leaf; operator events need every call frame.
    for (int i = 0; i < (leaf_is_pc ? 0 : n_ips); ++i)
      if (g_op_calls.find(ips[i]) == g_op_calls.end())
        missing[n_missing++] = ips[i];
    leaf_missing = leaf_is_pc && n_ips > 0 && g_leaves.find(ips[0]) == g_leaves.end();
  }
  if (n_missing == 0 && !leaf_missing) return;
  std::vector<std::pair<uintptr_t, OpCallInfo>> calls;
  calls.reserve(static_cast<size_t>(n_missing));
  for (int i = 0; i < n_missing; ++i) calls.emplace_back(missing[i], make_op_call(missing[i]));
  LeafInfo leaf;
  if (leaf_missing) leaf = make_leaf(ips[0]);
  std::lock_guard<std::mutex> g(g_sym_mu);
  for (auto& c : calls) g_op_calls.emplace(c.first, std::move(c.second));
  if (leaf_missing) g_leaves.emplace(ips[0], std::move(leaf));
}

uint64_t splice_mismatches() { return g_mismatches.load(); }

}  // namespace dc
