// Where an event from another source is (a kernel launch, an allocation): the node of the
// calling thread's open operator, or of its Python path, without the tree lock where its caches
// have it.
#include "../callpath/native_stack.h"
#include "capture_internal.h"
#include "lookup.h"
#include "registry.h"

namespace dc {

using namespace detail;

namespace {
// current_node's walk, out of line: its buffers (~16 KiB of stack) cost the fast path nothing.
// `in_op`: inside the open op, placed by its call frame, with no Python frame newer than its
// (only the frames below the op are needed: its innermost Python frame, the native ones inside).
[[gnu::noinline]] uint32_t current_node_walked(ThreadState* s, int d, bool in_op) {
  dc_raw_frame buf[kMaxPyDepth];
  if (g_opts.python && !g_opts.native && d == 0) {  // (a launch from Python: Triton, CUDA graphs)
    int kept;
    if (dc_walk_python_since(dc_this_thread_state(), &s->chain, kMaxPyDepth, &kept) >= 0) {
      Lookup lk(s);
      const void* py_frame;
      return chain_context(lk, s, kept, &py_frame);
    }
  }
  int n = g_opts.python ? dc_walk_python(dc_this_thread_state(), buf, in_op ? 1 : kMaxPyDepth) : 0;
  const OpEntry* top = d > 0 ? &s->ops[d - 1] : nullptr;
  uintptr_t ips[kMaxNative];
  int n_read = 0;
  const int n_ips = !g_opts.native ? 0
                    : in_op ? unwind_inside(s, *top, 1, ips, &n_read)
                            : (n_read = unwind_whole(s, 1, 0, ips));
  const uint64_t key = g_opts.native ? native_key(ips, n_read, n_ips, buf, n, top, kNoOpName) : 0;
  if (const ThreadState::NativeMemo* memo = memo_find(s, key)) return memo->node;
  uint32_t node = 0;
  if (!g_opts.native && top == nullptr && (n == 0 || cached_python_node(s, buf, n, &node)))
    return node;  // (a launch from Python outside any op: Triton, CUDA graphs)
  if (g_opts.native) native_warm_symbols(ips, n_read, false);
  TreeWriter t(tree());
  Describer live;
  NativePlace np;
  if (native_place(t, live, ips, n_ips, buf, n, top, nullptr, &np)) {
    memo_put(s, ThreadState::NativeMemo{key, np.node, np.py_node, np.cut});
    return np.node;
  }
  if (top != nullptr)
    return node_for(t, live, s, buf, n, true, top->node, top->py_node, top->py_frame,
                   &top->anchor, nullptr);
  return node_for(t, live, s, buf, n, false, 0, 0, nullptr, nullptr, nullptr);
}
// Python ran inside the open op `top` (an allocation in a record_function scope, such as the
// optimizer's step): what node_for gives, from the thread's memo when every frame newer than
// the op's own is there (no tree lock), and with no lookup at all when the op's frame is gone
// (a scope entered in a frame that has returned: the optimizer's step opens in __enter__).
[[gnu::noinline]] uint32_t under_op(ThreadState* s, const OpEntry& top, void* py_state) {
  dc_raw_frame buf[kMaxPyDepth];
  int above = 0;
  const int n = py_state ? walk_to_op_frame(py_state, buf, 0, top.py_frame, &top.anchor, &above) : 0;
  Lookup lk(s);
  uint32_t py_node;
  return context_under_op(lk, s, buf, n, above, top, &py_node);
}
}  // namespace

uint32_t current_node() {
  ThreadState* s = registry::self();
  int d = s->depth.load(std::memory_order_relaxed);
  // Inside an operator with no Python frame newer than it (an allocation or a launch inside an
  // op, the common case): the op's own node, without the tree lock or a full walk; with native
  // frames, only where the op has no call frame to place them under (nested_native_applies).
  if (d > 0 && !s->ops[d - 1].pending && s->ops[d - 1].epoch == g_epoch.load(std::memory_order_relaxed)) {
    const OpEntry& top = s->ops[d - 1];
    void* const py_state = g_opts.python ? dc_this_thread_state() : nullptr;
    const void* frame = py_state ? dc_python_frame(py_state) : nullptr;
    if (frame != top.py_frame) return under_op(s, top, py_state);
    if (!g_opts.native || top.native_cut < 0) return top.node;  // (nested_native_applies)
    return current_node_walked(s, d, true);
  }
  return current_node_walked(s, d, false);
}

}  // namespace dc
