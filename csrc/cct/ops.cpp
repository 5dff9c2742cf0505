// The operator layer: each thread's operator shadow stack (enter/exit from the torch hook or the
// dispatch tier), the context node of each operator, and the backward graft.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "../callpath/native_stack.h"
#include "deepcontext/c_api.h"
#include "capture_internal.h"
#include "clock.h"
#include "lookup.h"
#include "registry.h"

namespace dc {
namespace detail {
std::atomic<ThreadState*> g_dispatcher{nullptr};
}  // namespace detail

using namespace detail;

namespace {

OpObserver g_observer = nullptr;

// Backward context: (forward thread, sequence number) -> forward Python node. Direct-mapped and
// bounded: sequence numbers grow forever, and a backward pass only looks at recent ones.
constexpr uint64_t kSeqSlots = 1 << 18;
// Threads write slots concurrently (the forward and the autograd threads): each field is an
// atomic, and a slot is read like a seqlock (its seq before and after, invalidated during a
// write), so a reader never takes one writer's node with another's key.
struct SeqSlot {
  std::atomic<uint64_t> tid{0};
  std::atomic<int64_t> seq{-1};
  std::atomic<uint32_t> node{0};
};
SeqSlot* const g_seq = new SeqSlot[kSeqSlots]();  // never destroyed

// The autograd engine's "autograd::engine::evaluate_function: <node>" scope wraps each backward
// node and the gradient bookkeeping after it; it belongs with that node under the forward line.
bool is_engine_wrapper(const char* name) {
  static const char kWrapper[] = "autograd::engine::evaluate_function: ";
  return name[0] == 'a' && name[1] == 'u' &&  // (not "aten::": most names end here)
         std::strncmp(name, kWrapper, sizeof(kWrapper) - 1) == 0;
}

void remember_forward(int64_t seq_nr, uint64_t rf_tid, uint32_t py_node) {
  SeqSlot& slot = g_seq[static_cast<uint64_t>(seq_nr) % kSeqSlots];
  slot.seq.store(-1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  slot.tid.store(rf_tid, std::memory_order_relaxed);
  slot.node.store(py_node, std::memory_order_relaxed);
  slot.seq.store(seq_nr, std::memory_order_release);
}

// Whether some op has recorded sequence number seq_nr (its slot holds it).
bool forward_recorded(int64_t seq_nr) {
  return g_seq[static_cast<uint64_t>(seq_nr) % kSeqSlots].seq.load(std::memory_order_relaxed) == seq_nr;
}

// The forward Python context recorded for (forward thread, sequence number), or 0.
uint32_t forward_context(int64_t seq_nr, uint64_t fwd_tid) {
  const SeqSlot& slot = g_seq[static_cast<uint64_t>(seq_nr) % kSeqSlots];
  if (slot.seq.load(std::memory_order_acquire) != seq_nr) return 0;
  const uint64_t tid = slot.tid.load(std::memory_order_relaxed);
  const uint32_t node = slot.node.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  return (slot.seq.load(std::memory_order_relaxed) == seq_nr && tid == fwd_tid) ? node : 0;
}

// The fields of an entry the sampler thread reads while the owner may rewrite them (the worker
// rule reads the top entry of the latest dispatching thread without a lock: ids are never
// removed, so either value is a valid node): PolledU32 (thread_state.h), relaxed atomics.
inline void set_node(OpEntry& e, uint32_t node) { e.node = node; }
inline void set_epoch(OpEntry& e, uint32_t epoch) { e.epoch = epoch; }

// Gives a parked wrapper its node: under the forward line of backward node `seq_nr` when known,
// else under its ordinary parent.
void resolve_pending(Lookup& lk, OpEntry& e, int64_t seq_nr, uint64_t fwd_tid) {
  uint32_t fwd = seq_nr >= 0 ? forward_context(seq_nr, fwd_tid) : 0;
  if (fwd != 0) {
    set_node(e, lk.child(lk.child(fwd, lk.backward_marker()), e.frame));
    e.py_node = fwd;
    e.seq_nr = seq_nr;
  } else {
    set_node(e, lk.child(e.node, e.frame));
  }
  e.pending = false;
}

// The depth the next entry of `s`'s stack goes to, or -1 when the stack is full (the push is
// counted so its pop stays balanced). Entries left open by an earlier session are dropped.
inline int push_depth(ThreadState* s, uint32_t epoch) {
  int d = s->depth.load(std::memory_order_relaxed);
  if (d > 0 && s->ops[d - 1].epoch != epoch) {
    d = 0;
    s->overflow = 0;
    s->depth.store(0, std::memory_order_release);
  }
  if (d >= kMaxOpDepth) {
    ++s->overflow;
    return -1;
  }
  return d;
}

// The start of an operator event: the thread's state (now the latest dispatching thread), the
// session epoch and the stack slot; null when capture is off or the stack is full.
inline ThreadState* begin_op(uint32_t* epoch, int* d) {
  if (!g_enabled.load(std::memory_order_relaxed) || !g_opts.ops) return nullptr;
  ThreadState* s = registry::self();
  if (g_dispatcher.load(std::memory_order_relaxed) != s)
    g_dispatcher.store(s, std::memory_order_release);
  *epoch = g_epoch.load(std::memory_order_relaxed);
  *d = push_depth(s, *epoch);
  return *d < 0 ? nullptr : s;
}

std::atomic<bool> g_prefetch_next{true};  // (off only to measure it: set_op_prefetch)

// Fetches, before the Python stack is walked, the lines this event's lookups will read: the op
// name's first bytes and its pointer slot, and what the event after the last one read the last
// time (OpTallySlot::then_*). Each lookup needs the one before it (a placed frame, then the
// Python node's memo, then the op node's), and their lines had been evicted since the last
// step, so they waited one after another: on GPT-2 generate 79% of chain_nodes' samples were
// its placed-frame load. There 97% of the guesses hold, and chain_nodes took 29-44% less time
// (cpu-2026-12-07-prefetch-e27e25c.md); a wrong guess costs only the fetches.
// (Always inline: out of line, GCC's pure-const pass finds a function of prefetches "pure" and
// drops its calls, whose result nothing uses.)
[[gnu::always_inline]] inline void prefetch_next_event(ThreadState* s, const char* name) {
  __builtin_prefetch(name);  // (its first bytes: is_engine_wrapper, the name cache's check)
  __builtin_prefetch(&Lookup::name_slot(s, name));
  const OpTally* t = s->tally;
  if (t == nullptr || s->last_tally == 0) return;
  const OpTallySlot& last = t->slots[s->last_tally - 1];
  for (const uint16_t i : last.then_placed)
    if (i != ThreadState::kNoPlaced) __builtin_prefetch(&s->placed[i]);
  s->node_memo.prefetch(last.then_parent);
  s->node_memo.prefetch(last.then_node);
}

// What this event looked up, recorded in the last event's slot for the next time (above).
inline void record_next_event(ThreadState* s, uint32_t parent, uint32_t node, OpTallySlot* slot) {
  OpTally* t = s->tally;
  if (t != nullptr && s->last_tally != 0) {
    OpTallySlot& last = t->slots[s->last_tally - 1];
    last.then_parent = parent;
    last.then_node = node;
    last.then_placed[0] = s->placed_used[0];
    last.then_placed[1] = s->placed_used[1];
  }
  s->placed_used[0] = s->placed_used[1] = ThreadState::kNoPlaced;
  s->last_tally = slot != nullptr ? static_cast<uint32_t>(slot - t->slots) + 1 : 0;
}

// Where an engine event outside any op (enter_event) goes without the Python stack, or 0: the
// engine's work after the node this thread ran last in this session (DC_OP_AFTER_NODE) under
// that node; a node under the forward line recorded for it (forward_context's node).
uint32_t engine_place(const ThreadState* s, uint32_t epoch, bool after_node, int64_t seq_nr,
                      uint64_t fwd_tid) {
  if (after_node) return s->after_node_epoch == epoch ? s->after_node : 0;
  return seq_nr >= 0 ? forward_context(seq_nr, fwd_tid) : 0;
}

// The context of an event from its Python frames `buf` and the op open around it (`top`).
// `above`: frames_above_op's count for them under `top`, -1 where not yet known.
uint32_t python_context(Lookup& lk, ThreadState* s, const dc_raw_frame* buf, int n, int above,
                        const OpEntry* top, uint32_t* py_node) {
  if (top != nullptr) {
    if (above < 0) above = frames_above_op(buf, n, top->py_frame, &top->anchor);
    return context_under_op(lk, s, buf, n, above, *top, py_node);
  }
  uint32_t node = 0;
  if (n > 0 && !cached_python_node(s, buf, n, &node))
    node = node_for(lk.writer(), Describer{}, s, buf, n, false, 0, 0, nullptr, nullptr, nullptr);
  *py_node = node;
  return node;
}

// An operator event, compiled twice: without the native layer (kNative false, every event's
// path unless native frames are on) none of the native code is in it, so an event runs through
// fewer cache lines of code (the cost of an event is mostly instruction-cache misses:
// benchmarks/results/cpu-2026-12-05-icache-3469891.md).
template <bool kNative>
[[gnu::always_inline]] inline void enter_event(const char* name, uint64_t handle, int64_t seq_nr,
                                               uint64_t rf_tid, uint64_t fwd_tid, bool is_backward,
                                               bool is_scope, bool after_node) {
  uint32_t epoch;
  int d;
  ThreadState* s = begin_op(&epoch, &d);
  if (s == nullptr) return;
  if (g_prefetch_next.load(std::memory_order_relaxed)) prefetch_next_event(s, name);
  OpEntry* top = d > 0 ? &s->ops[d - 1] : nullptr;
  // A nested operator's context is its parent's node unless Python ran in between (a Python
  // callback inside the op), which the innermost frame alone tells: most operator events are
  // nested (88% in a GPT-2 training step), so the whole stack is walked only when that fails.
  dc_raw_frame buf[kMaxPyDepth];
  void* const py_state = g_opts.python ? dc_this_thread_state() : nullptr;
  // The autograd engine's events outside any op, where its wrapper around each node is not
  // recorded (torch_hook.cpp): a node whose forward line is known goes there, and the engine's
  // work after a node under that node, so neither reads the Python stack (only its innermost
  // frame, for what runs inside).
  const uint32_t place = DC_UNLIKELY(top == nullptr && (after_node || is_backward))
                            ? engine_place(s, epoch, after_node, seq_nr, fwd_tid)
                            : 0;
  const bool engine = place != 0;
  // Outside any op, only the frames newer than the unchanged outer part of the last such op's
  // are read (a GPT-2 step's outer frames are the same for every op it runs), into the thread's
  // chain, not `buf`: chain_context gives their nodes.
  constexpr int kNoChain = -2;
  int kept = kNoChain;
  int above = -1;  // (frames_above_op's count, once walk_to_op_frame has given it)
  int n = py_state && top == nullptr && !kNative && !engine
              ? dc_walk_python_since(py_state, &s->chain, kMaxPyDepth, &kept)
              : -1;
  // Python newer than an open scope's frame (the optimizer's loop in its step's scope): placed
  // from the thread's scope chain in the lookup below, which walks it.
  bool in_scope = false;
  if (n >= 0) {
    n = 0;  // (frames in `buf`: none)
  } else {
    kept = kNoChain;
    n = py_state && !engine ? dc_walk_python(py_state, buf, top != nullptr ? 1 : kMaxPyDepth) : 0;
    if (top != nullptr && py_state && (n > 0 ? buf[0].frame : nullptr) != top->py_frame) {
      if (!kNative && top->anchor.n > 0)
        in_scope = true;
      else
        n = walk_to_op_frame(py_state, buf, n, top->py_frame, &top->anchor, &above);
    }
  }
  // A nested event gets native frames only inside an op placed by its own call frame, with no
  // Python frame newer than the op's (native_place): else its stack would be walked for nothing
  // (71% of a GPT-2 training step's events run under autograd nodes, which have no call frame).
  const bool native =
      kNative && !engine && nested_native_applies(top, n > 0 ? buf[0].frame : nullptr);
  uintptr_t ips[kMaxNative];
  int n_read = 0;
  const uint64_t name_hash = native ? std::hash<std::string_view>{}(name) : 0;
  const int n_ips = !native ? 0
                    : top ? unwind_inside(s, *top, 0, ips, &n_read)
                          : (n_read = unwind_whole(s, 0, name_hash, ips));
  const bool wrapper = is_engine_wrapper(name);
  const bool backward_node = seq_nr >= 0 && (is_backward || wrapper);
  const uint64_t key = native ? native_key(ips, n_read, n_ips, buf, n, top, name_hash) : 0;
  const ThreadState::NativeMemo* memo = memo_find(s, key);
  if (DC_UNLIKELY(native) && memo == nullptr) native_warm_symbols(ips, n_read, false);  // outside the lock
  uint32_t node, frame, py_node = 0, parent = UINT32_MAX;
  int cut = -1;
  bool pending;
  const void* py_frame = n > 0 ? buf[0].frame : nullptr;
  if (DC_UNLIKELY(engine)) {
    py_frame = py_state ? dc_python_frame(py_state) : nullptr;
    if (after_node) {
      parent = place;
      py_node = s->after_node_py;
    }
  }
  {
    // Every lookup goes through the thread's caches; the common event never takes the lock.
    Lookup lk(s);
    // (before anything else: the chain's new frames need their nodes whichever context wins)
    const uint32_t chained = kept != kNoChain ? chain_context(lk, s, kept, &py_frame) : 0;
    if (top && DC_UNLIKELY(top->pending)) resolve_pending(lk, *top, backward_node ? seq_nr : -1, fwd_tid);
    if (backward_node && !(top && top->seq_nr == seq_nr)) {
      const uint32_t fwd = engine && !after_node ? place : forward_context(seq_nr, fwd_tid);
      if (fwd != 0) {
        py_node = fwd;
        parent = lk.child(fwd, lk.backward_marker());
      }
    }
    if (parent == UINT32_MAX && DC_UNLIKELY(memo != nullptr)) {
      parent = memo->node;
      py_node = top ? top->py_node : memo->py_node;
      cut = memo->cut;
    } else if (parent == UINT32_MAX && DC_UNLIKELY(n_ips > 0)) {
      NativePlace np;
      if (native_place(lk.writer(), Describer{}, ips, n_ips, buf, n, top, name, &np)) {
        parent = np.node;
        py_node = np.py_node;
        cut = np.cut;
        memo_put(s, ThreadState::NativeMemo{key, np.node, np.py_node, np.cut});
      }
    }
    if (parent == UINT32_MAX && kept != kNoChain) parent = py_node = chained;
    if (parent == UINT32_MAX && in_scope &&
        !scope_chain_context(lk, s, py_state, *top, &parent, &py_node)) {
      parent = UINT32_MAX;
      n = walk_to_op_frame(py_state, buf, n, top->py_frame, &top->anchor, &above);
    }
    if (parent == UINT32_MAX) parent = python_context(lk, s, buf, n, above, top, &py_node);
    frame = lk.op_frame(name);
    // An engine wrapper without a sequence number learns its forward line from the backward
    // node it runs next; until then it is parked on its ordinary parent.
    pending = wrapper && seq_nr < 0;
    node = pending ? parent : lk.child(parent, frame);
  }
  // Without an exit report (dispatch tier), the last op to see a number is the best guess for
  // the one that created the autograd node; with one, op_exit records it exactly.
  if (DC_LIKELY(!backward_node && seq_nr >= 0)) remember_forward(seq_nr, rf_tid, py_node);
  if (DC_UNLIKELY(is_backward) && top == nullptr) {
    s->after_node = node;
    s->after_node_py = py_node;
    s->after_node_epoch = epoch;
  }
  OpEntry& e = s->ops[d];
  set_node(e, node);
  e.frame = frame;
  e.pending = pending;
  e.py_node = py_node;
  e.py_frame = py_frame;
  if (DC_UNLIKELY(is_scope))
    set_scope_anchor(py_state, py_frame, &e.anchor);
  else
    e.anchor.n = 0;
  e.handle = handle;
  e.seq_nr = backward_node ? seq_nr : (top ? top->seq_nr : -1);
  e.child_ns = 0;
  e.native_cut = cut;
  if (DC_UNLIKELY(native)) {
    set_native_anchor(e, ips, n_read, n_ips, cut);
    e.entry_sp = reinterpret_cast<uintptr_t>(&buf[0]);
  }
  set_epoch(e, epoch);
  e.fwd_seq = backward_node ? -1 : seq_nr;
  e.rf_tid = rf_tid;
  e.scope = false;
  // Its exit counts it in this slot; fetched now, the line is there by then.
  e.tally = pending ? nullptr : tally_slot(s, node);
  if (e.tally != nullptr) __builtin_prefetch(e.tally, 1);
  record_next_event(s, parent, node, e.tally);
  e.t0_ticks = now_ticks();
  s->depth.store(d + 1, std::memory_order_release);
  if (DC_UNLIKELY(g_observer != nullptr)) g_observer(name, 0, node);
}

[[gnu::noinline]] void enter_event_native(const char* name, uint64_t handle, int64_t seq_nr,
                                          uint64_t rf_tid, uint64_t fwd_tid, bool is_backward,
                                          bool is_scope, bool after_node) {
  enter_event<true>(name, handle, seq_nr, rf_tid, fwd_tid, is_backward, is_scope, after_node);
}

}  // namespace

void set_op_prefetch(bool on) { g_prefetch_next.store(on, std::memory_order_relaxed); }

void op_enter(const char* name, uint64_t handle, int64_t seq_nr, uint64_t rf_tid,
              uint64_t fwd_tid, int flags) {
  const bool is_backward = (flags & DC_OP_BACKWARD) != 0, is_scope = (flags & DC_OP_SCOPE) != 0;
  const bool after_node = (flags & DC_OP_AFTER_NODE) != 0;
  if (DC_UNLIKELY(g_opts.native))
    enter_event_native(name, handle, seq_nr, rf_tid, fwd_tid, is_backward, is_scope, after_node);
  else
    enter_event<false>(name, handle, seq_nr, rf_tid, fwd_tid, is_backward, is_scope, after_node);
}

namespace {
// The rare parts of an exit, out of line so that the common one runs through few lines of code:
// a wrapper that never saw its backward node, and an exit counted in the tree (the lock) when
// the thread's tally is full.
[[gnu::noinline]] void resolve_pending_at_exit(ThreadState* s, OpEntry& e) {
  Lookup lk(s);
  resolve_pending(lk, e, -1, 0);
}

[[gnu::noinline]] void count_in_tree(uint32_t node, int64_t own, int created) {
  TreeWriter t(tree());
  if (created > 0) t.add(node, m_autograd_nodes, created);
  if (t.value(node, m_op_count) == 0.0) t.add(node, m_op_first_time, own * 1e-9);
  t.add(node, m_op_time, own * 1e-9);
  t.add(node, m_op_count, 1.0);
}

// A scope closed out of order (record_function across an await or a generator): its entry is
// taken out of the middle of the stack, so it cannot stay open for the rest of the run. Only
// entries below the top move, and the depth drops last, so the signal handler (which reads the
// top) sees either the old stack or the new one. Returns the removed entry's index, or -1.
[[gnu::noinline]] int remove_from_middle(ThreadState* s, int d, uint64_t handle, OpEntry* out) {
  for (int i = d - 2; i >= 0; --i) {
    if (s->ops[i].handle != handle) continue;
    *out = s->ops[i];
    for (int j = i; j < d - 1; ++j) s->ops[j] = s->ops[j + 1];
    s->depth.store(d - 1, std::memory_order_release);
    return i;
  }
  return -1;
}
}  // namespace

void op_exit(uint64_t handle, int seq_consumed) {
  ThreadState* s = registry::current();
  if (s == nullptr) return;
  if (DC_UNLIKELY(s->overflow > 0)) {
    --s->overflow;
    return;
  }
  int d = s->depth.load(std::memory_order_relaxed);
  if (d == 0) return;
  // The closed entry, read in place when it was the top: this thread alone writes its stack, and
  // pushes nothing before this exit ends (the signal handler and the sampler only read).
  OpEntry removed;
  OpEntry* closed = &s->ops[d - 1];
  int at = d - 1;  // where the closed entry was; its parent (at - 1) had its time inside
  if (DC_LIKELY(closed->handle == handle)) {
    s->depth.store(d - 1, std::memory_order_release);
  } else if ((at = remove_from_middle(s, d, handle, &removed)) >= 0) {
    closed = &removed;
  } else {
    return;  // not ours (entered before capture, or while paused)
  }
  OpEntry& e = *closed;
  int64_t elapsed = ticks_to_ns(now_ticks() - e.t0_ticks);
  if (DC_UNLIKELY(e.scope)) {  // the ops inside a scope are nested ops of the op around it
    if (at >= 1 && s->ops[at - 1].epoch == e.epoch) s->ops[at - 1].child_ns += e.child_ns;
    return;
  }
  if (at >= 1 && s->ops[at - 1].epoch == e.epoch) s->ops[at - 1].child_ns += elapsed;
  // Entered in an earlier session (or recording paused since): charged nothing.
  if (!g_enabled.load(std::memory_order_relaxed) || e.epoch != g_epoch.load(std::memory_order_relaxed))
    return;
  // An op that hides its nested calls (torch_hook.cpp) consumed the numbers of every node they
  // created: each maps to its line, unless a nested op recorded its own (nested mode).
  const int created = e.fwd_seq >= 0 && seq_consumed > 0 ? std::min(seq_consumed, 64) : 0;
  if (created > 0) remember_forward(e.fwd_seq, e.rf_tid, e.py_node);
  for (int k = 1; k < created; ++k)
    if (!forward_recorded(e.fwd_seq + k)) remember_forward(e.fwd_seq + k, e.rf_tid, e.py_node);
  if (DC_UNLIKELY(e.pending)) resolve_pending_at_exit(s, e);
  const int64_t own = elapsed - e.child_ns;
  if (DC_UNLIKELY(!tally_exit(s, e.tally, e.node, own, created)))  // the thread's tally is full
    count_in_tree(e.node, own, created);
  if (DC_UNLIKELY(g_observer != nullptr)) g_observer(nullptr, 1, e.node);
}


namespace {
// A scope's frame, from the thread's memo when this address held this text last time (the
// module layer passes each module's cached path string every call); the tree on a miss.
uint32_t scope_frame(Lookup& lk, ThreadState* s, int kind, const char* name, const char* extra) {
  const uint64_t slot = (reinterpret_cast<uintptr_t>(name) * 0x9E3779B97F4A7C15ull) >> 56;
  ThreadState::ScopeNameSlot& e = s->scope_names[slot];
  if (e.ptr == name && e.kind == kind && e.name == name && e.extra == extra) return e.frame;
  e.frame = lk.writer().named_frame(static_cast<Kind>(kind), name, extra);
  e.ptr = name;
  e.kind = kind;
  e.name = name;
  e.extra = extra;
  return e.frame;
}

// The node of frames buf[0..k) (innermost first) under the open op `top`: context_under_op's,
// memoized by the frames' code and place (ThreadState::ScopeMemo).
uint32_t scope_context(Lookup& lk, ThreadState* s, const dc_raw_frame* buf, int n, int k,
                       const OpEntry& top, uint32_t* py_node) {
  if (k == 0) return context_under_op(lk, s, buf, n, k, top, py_node);
  uint64_t key = key_mix(top.node, static_cast<uint64_t>(k));
  for (int i = 0; i < k; ++i)
    key = key_mix(key, reinterpret_cast<uintptr_t>(buf[i].code) ^
                           (static_cast<uint64_t>(static_cast<uint32_t>(buf[i].offset)) << 1) ^
                           static_cast<uint64_t>(buf[i].entry & 1));
  key = key ? key : 1;
  const uint32_t epoch = dc_code_epoch();
  ThreadState::ScopeMemo& m = s->scope_memo[key >> 56];
  if (m.key == key && m.base == top.node && m.epoch == epoch) return *py_node = m.node;
  const uint32_t node = context_under_op(lk, s, buf, n, k, top, py_node);
  m = ThreadState::ScopeMemo{key, top.node, epoch, node};
  return node;
}
}  // namespace

void scope_enter(int kind, const char* name, const char* extra, uint64_t handle, int skip_py) {
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  ThreadState* s = registry::self();
  const uint32_t epoch = g_epoch.load(std::memory_order_relaxed);
  const int d = push_depth(s, epoch);
  if (d < 0) return;
  void* const py_state = g_opts.python ? dc_this_thread_state() : nullptr;
  const int skip = std::max(skip_py, 0);  // (the caller's own frames: the module layer's hook)
  OpEntry* top = d > 0 ? &s->ops[d - 1] : nullptr;
  dc_raw_frame buf[kMaxPyDepth];
  uint32_t node, frame, py_node = 0;
  const void* py_frame;
  {
    Lookup lk(s);
    if (top && top->pending) resolve_pending(lk, *top, -1, 0);
    // Under an open op or scope (a submodule under its parent's scope, a few frames newer than
    // it), only those frames are walked and looked up, as an operator event's are.
    int n = 0, above = 0;
    if (py_state && top != nullptr) {
      n = walk_to_op_frame(py_state, buf, 0, top->py_frame, &top->anchor, &above);
      if (n <= skip) n = dc_walk_python(py_state, buf, skip + 1);  // (the op's frame is gone)
    } else if (py_state) {
      n = dc_walk_python(py_state, buf, kMaxPyDepth);
    }
    const int m = std::max(0, n - skip);
    const uint32_t parent =
        top ? scope_context(lk, s, buf + skip, m, std::clamp(above - skip, 0, m), *top, &py_node)
            : python_context(lk, s, buf + skip, m, -1, nullptr, &py_node);
    py_frame = m > 0 ? buf[skip].frame : nullptr;
    frame = scope_frame(lk, s, kind, name, extra);
    node = lk.child(parent, frame);
  }
  OpEntry& e = s->ops[d];
  set_node(e, node);
  e.frame = frame;
  e.pending = false;
  e.py_node = py_node;
  e.py_frame = py_frame;
  e.anchor.n = 0;  // (a module's scope opens in the frame that runs it)
  e.handle = handle;
  e.seq_nr = top ? top->seq_nr : -1;
  e.child_ns = 0;
  e.native_cut = -1;
  set_epoch(e, epoch);
  e.fwd_seq = -1;
  e.rf_tid = 0;
  e.scope = true;
  e.tally = nullptr;
  e.t0_ticks = now_ticks();
  s->depth.store(d + 1, std::memory_order_release);
}

void op_enter_linked(const char* name, uint64_t handle, uint32_t issuer) {
  uint32_t epoch;
  int d;
  ThreadState* s = begin_op(&epoch, &d);
  if (s == nullptr) return;
  uint32_t node, frame;
  {
    Lookup lk(s);
    if (!lk.writer().has_node(issuer)) issuer = 0;  // (a collective is rare: the lock is fine)
    frame = lk.op_frame(name);
    node = lk.child(issuer, frame);
  }
  OpEntry& e = s->ops[d];
  e = OpEntry{};
  e.node = node;
  e.frame = frame;
  e.py_node = issuer;
  e.py_frame = nullptr;  // the worker runs no Python: nested ops and samples stay under `node`
  e.handle = handle;
  e.seq_nr = -1;
  e.native_cut = -1;
  e.epoch = epoch;
  e.fwd_seq = -1;
  e.t0_ticks = now_ticks();
  s->depth.store(d + 1, std::memory_order_release);
  if (g_observer) g_observer(name, 0, node);
}

void set_op_observer(OpObserver obs) { g_observer = obs; }

}  // namespace dc
