// Shared by the capture translation units (registry, sampler, context, ops, capture); not an API.
#pragma once
#include <sys/types.h>
#include <time.h>

#include <atomic>

#include "capture.h"
#include "thread_state.h"
#include "tree.h"

// Branch hints for the operator path, whose code is fetched anew for nearly every event (a
// training step's code does not fit the L1 instruction cache): the rare paths (native frames,
// scopes, parked engine wrappers) are laid out after the common one, so that it spans fewer lines.
#define DC_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define DC_LIKELY(x) __builtin_expect(!!(x), 1)

namespace dc::detail {

// Capture state. `g_started`: between start() and stop() (timers exist, threads are registered
// and armed). `g_enabled`: started and not paused (events are recorded). `g_epoch`: bumped at
// every start(); every event source compares the epoch it saw with it.
extern std::atomic<bool> g_started;
extern std::atomic<bool> g_enabled;
extern std::atomic<uint32_t> g_epoch;
extern Options g_opts;
extern uint32_t m_cpu_time, m_op_time, m_op_count, m_op_first_time, m_autograd_nodes;

// The thread that most recently entered an operator (its open op is where Polled workers'
// time goes: docs/design.md, "Worker threads").
extern std::atomic<ThreadState*> g_dispatcher;

// sampler.cpp: per-thread CPU-time timers, their signal handler, and the drain.
extern bool g_native_in_handler;
bool create_timer(ThreadState* s);  // registry lock held
void delete_timer(ThreadState* s);  // registry lock held
// Sets `timer` to its first expiry one interval of CPU time from now, overruns counted afresh.
bool restart_timer(timer_t timer);
// Restarts `timer` if it has expired and its signal is still to come (drop_pending_sample).
void drop_pending_expiry(timer_t timer);
void install_handler();
// Folds s's buffered samples into the tree (the registry's drain lock held; never from a
// handler or a TLS destructor). Symbols are looked up before the tree lock is taken.
void drain(ThreadState* s);
// "[thread] <name>" under the root.
uint32_t thread_node(const char* name);

// op_tally.cpp: folds s's operator tally (OpTally) into the tree (the registry's drain lock held).
void fold_op_tallies(ThreadState* s);
// The calling thread's tally slot for `node`, taken at its first use; null when the tally has no
// room (op_tally.cpp).
OpTallySlot* take_tally_slot(ThreadState* s, uint32_t node);
// The same, inline where the node has its slot already (nearly every operator event).
inline OpTallySlot* tally_slot(ThreadState* s, uint32_t node) {
  OpTally* t = s->tally;
  const NodeMemo* m = t != nullptr ? s->node_memo.peek(node) : nullptr;
  if (DC_LIKELY(m != nullptr && m->tally != 0 &&
                s->phase.load(std::memory_order_relaxed) != Phase::Free))
    return &t->slots[m->tally - 1];
  return take_tally_slot(s, node);
}
// An exit of `node` counted in the calling thread's tally (in `slot` when it is that node's, as
// tally_slot gave it at the entry); false when it has no room.
bool tally_exit(ThreadState* s, OpTallySlot* slot, uint32_t node, int64_t own_ns, int created_nodes);

// sampler_thread.cpp: the native sampler thread (drains, polls workers, scans, reaps).
void start_sampler_thread();
void stop_sampler_thread();

// context.cpp: where an event is, as a tree node.
// Where frame descriptions come from: the live stack (op path) or a sample's copies (drain).
struct Describer {
  const Sample* sample = nullptr;  // null: the frames are live on this thread
  uint32_t frame(TreeWriter& t, const dc_raw_frame* buf, int i) const {
    if (sample == nullptr) return t.python_frame(buf[i], true);
    for (int j = 0; j < sample->n_new; ++j) {
      if (sample->new_index[j] != i) continue;
      const Sample::New& nw = sample->news[j];
      CodeText text{sample->text + nw.file, sample->text + nw.name, nw.line};
      return t.python_frame(buf[i], false, &text, sample->keys[i]);
    }
    return t.python_frame(buf[i], false, nullptr, sample->keys[i]);
  }
};
// The node of the Python path `buf` (innermost first, no open op) from the thread's caches alone
// (its last path and ThreadState::py_children), without the tree lock; false: not all cached.
bool cached_python_node(ThreadState* s, const dc_raw_frame* buf, int n, uint32_t* node);
// Nodes for the frames of chain `c` (the thread's own) from index `from` on (the ones the last
// dc_walk_python_since added, live and not yet described), the frame at index `first` placed
// under node `base`: from the thread's memos alone when `t` is null, stopping at the first they
// lack, whose index it returns (c.n: all given); else interned.
int chain_nodes(TreeWriter* t, ThreadState* s, dc_chain& c, int from, int first, uint32_t base);
// How many frames of `buf` (innermost first, n frames) go below the open op: those newer than
// its own frame `op_frame` (null: every frame), or, for a scope whose frame has returned, those
// from the innermost of its anchor frames `a` still there on (ScopeAnchor; null or n == 0: an
// operator); 0 when none is among them: the op itself is the context.
int frames_above_op(const dc_raw_frame* buf, int n, const void* op_frame, const ScopeAnchor* a);
// The calling thread's Python frames for an event under an open op whose frame `op_frame` is not
// the innermost, as far as frames_above_op needs them: `have` (the frames already in `buf`) when
// an operator's frame is no longer on the stack, else the frames up to the op's frame or the
// scope's anchor (the whole stack where that is deeper than a short walk). Returns the count in
// `buf` (kMaxPyDepth frames of room) and sets *above to what frames_above_op gives for them.
int walk_to_op_frame(void* py_state, dc_raw_frame* buf, int have, const void* op_frame,
                     const ScopeAnchor* a, int* above);
// Records in `a` the frames outside `py_frame` (the calling thread's innermost, where a scope
// begins) and their code; a->n = 0 where `py_frame` is not the innermost or there is no Python.
void set_scope_anchor(void* py_state, const void* py_frame, ScopeAnchor* a);
// The node of Python frames buf[k-1 .. 0] (outer to inner, all newer than the open op) under
// op node `op_node` from ThreadState::py_children alone, without the tree lock; false: not all
// memoized yet (node_for memoizes them, for live frames with the owner's cache).
bool cached_under_op(ThreadState* s, uint32_t op_node, const dc_raw_frame* buf, int k,
                     uint32_t* node);
// The context node for Python frames `buf` (innermost first), under the innermost open op when
// `has_op`. Sets *py_node to the innermost Python node of that context. `cache`: the owner's
// prefix cache, or null.
uint32_t node_for(TreeWriter& t, const Describer& d, ThreadState* cache, const dc_raw_frame* buf,
                  int n, bool has_op, uint32_t op_node, uint32_t op_py_node, const void* op_frame,
                  const ScopeAnchor* op_anchor, uint32_t* py_node);
// The context with native frames spliced in; false when that does not apply (no native stack,
// stacks that cannot be paired, or Python frames newer than the open operator). Symbols must
// have been warmed (native_warm_symbols) outside the tree lock.
bool native_place(TreeWriter& t, const Describer& d, const uintptr_t* ips, int n_ips,
                  const dc_raw_frame* buf, int n, const OpEntry* top, const char* op_name,
                  NativePlace* out, bool leaf_is_pc = false);

// The native stack of an event inside `top` (an op placed by its own call frame) into `ips`,
// innermost first: the frames outside an open op's call frame cannot change while it runs, so
// only the first s->unwind_hint[which] are unwound and the op's call frame is found among them
// just inside the frames recorded outside it (OpEntry::native_anchor); the whole stack is unwound
// where it is not, and the hint grows. Returns the whole stack's depth (what native_place takes:
// it reads only the frames inside the op) and sets *n_read to the frames written. The frames
// begin where the caller's native::backtrace(ips, max, 1) would begin them (noinline: one frame).
[[gnu::noinline]] int unwind_inside(ThreadState* s, const OpEntry& top, int which, uintptr_t* ips,
                                    int* n_read);
// The whole native stack of an event outside any op (`which` 0: an op entering, `what` its
// name's hash, by text since backward ops' names are temporaries; 1: another event, `what` 0),
// as the caller's native::backtrace(ips, kMaxNative, 1) gives it, from the thread's remembered
// stacks where one holds (stack_paths.h). Returns the count.
[[gnu::noinline]] int unwind_whole(ThreadState* s, int which, uint64_t what, uintptr_t* ips);
// Records `e`'s call frame (at outermost-first depth `cut` of a stack `n_ips` deep, of which
// ips[0, n_read) are known) and the frames outside it, for unwind_inside.
void set_native_anchor(OpEntry& e, const uintptr_t* ips, int n_read, int n_ips, int cut);

// The memo key of a native placement (ThreadState::native_memo): a hash of the native stack,
// the Python frames' identities (top-level events) or the open op's node and cut (nested ones),
// and `what`: the op's name's hash (std::hash, as unwind_whole's key takes it), or kNoOpName for
// launches and probes. 0: not a native placement (no native stack, or Python frames newer than
// the open op: the Python-only path applies).
// `n_read`: the frames of `ips` known (unwind_inside), of the n_ips the stack has.
uint64_t native_key(const uintptr_t* ips, int n_read, int n_ips, const dc_raw_frame* buf, int n,
                    const OpEntry* top, uint64_t what);
constexpr uint64_t kNoOpName = 0x5BD1E995ull;

}  // namespace dc::detail
