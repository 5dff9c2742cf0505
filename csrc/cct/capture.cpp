#include "capture.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <vector>

#include "../callpath/native_stack.h"
#include "capture_internal.h"

namespace dc {
namespace detail {

std::atomic<bool> g_enabled{false};
Options g_opts;
uint32_t m_cpu_time, m_op_time, m_op_count;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace detail

using namespace detail;

namespace {

OpObserver g_observer = nullptr;
// Bumped at every start(): operators left open when a session stopped (their exits were never
// reported once the hook was disabled) must not become the parents of the next session's ops.
std::atomic<uint32_t> g_epoch{0};
std::mutex g_notes_mu;
auto& g_notes = *new std::vector<std::string>();  // never destroyed (threads outlive exit)

// Backward context: (forward thread, sequence number) -> forward Python node. Direct-mapped and
// bounded: sequence numbers grow forever, and a backward pass only looks at recent ones.
constexpr uint64_t kSeqSlots = 1 << 18;
struct SeqSlot {
  uint64_t tid;
  int64_t seq;
  uint32_t node;
};
SeqSlot* g_seq = nullptr;

uint32_t op_frame(Tree& t, ThreadState* s, const char* name) {
  auto& e = s->op_names[(reinterpret_cast<uintptr_t>(name) >> 3) & 255];
  if (e.ptr == name && e.text == name) return e.frame;
  e.frame = t.named_frame(Kind::Op, name);
  e.ptr = name;
  e.text = name;
  return e.frame;
}

uint32_t op_child(Tree& t, ThreadState* s, uint32_t parent, uint32_t frame) {
  auto& e = s->op_children[(parent * 31u + frame) & 511u];
  if (e.parent == parent && e.frame == frame) return e.node;
  e = ThreadState::OpChild{parent, frame, t.child(parent, frame)};
  return e.node;
}

// The common case of an operator event, without the tree lock: no backward graft, no buffered
// samples, and the context (Python path, or with native frames the memoized placement), the
// op's frame and its node all cached by this thread (ids are never removed, so a cache hit is
// exact). False: take the locked path.
bool fast_context(ThreadState* s, const dc_raw_frame* buf, int n, const OpEntry* top,
                  const char* name, bool special, const ThreadState::NativeMemo* memo,
                  uint32_t* node, uint32_t* frame, uint32_t* py_node, int* cut) {
  if (special || (top && top->pending) ||
      s->head.load(std::memory_order_relaxed) != s->tail.load(std::memory_order_relaxed))
    return false;
  uint32_t parent;
  if (g_opts.native) {
    if (memo == nullptr) return false;
    parent = memo->node;
    *py_node = top ? top->py_node : memo->py_node;
    *cut = memo->cut;
  } else if (top != nullptr) {
    if ((n > 0 ? buf[0].frame : nullptr) != top->py_frame) return false;
    parent = top->node;
    *py_node = top->py_node;
  } else {
    if (n == 0 || n >= kMaxPyDepth || s->cache_n != n || s->cached_prefix(buf, n) != n)
      return false;
    parent = s->cache_node[n - 1];
    *py_node = parent;
  }
  const auto& on = s->op_names[(reinterpret_cast<uintptr_t>(name) >> 3) & 255];
  if (on.ptr != name || on.text != name) return false;
  const auto& oc = s->op_children[(parent * 31u + on.frame) & 511u];
  if (oc.parent != parent || oc.frame != on.frame) return false;
  *frame = on.frame;
  *node = oc.node;
  return true;
}

// After a backtrace outside any signal handler: the thread's libunwind TLS exists now.
void mark_native_ready(ThreadState* s) {
  if (!s->native_ready.load(std::memory_order_relaxed))
    s->native_ready.store(true, std::memory_order_release);
}

// Unwinds once on the calling thread, outside a signal handler, so its samples may unwind.
void warm_native(ThreadState* s) {
  if (!g_opts.native || s->native_ready.load(std::memory_order_relaxed)) return;
  uintptr_t ips[4];
  native::backtrace(ips, 4, 0);
  mark_native_ready(s);
}

// The thread's memoized native placement for `key`, or null.
ThreadState::NativeMemo* memo_slot(ThreadState* s, uint64_t key) {
  return key != 0 ? &s->native_memo[key & 511u] : nullptr;
}

// The autograd engine's "autograd::engine::evaluate_function: <node>" scope wraps each backward
// node and the gradient bookkeeping after it; it belongs with that node under the forward line.
bool is_engine_wrapper(const char* name) {
  static const char kWrapper[] = "autograd::engine::evaluate_function: ";
  return std::strncmp(name, kWrapper, sizeof(kWrapper) - 1) == 0;
}

void remember_forward(int64_t seq_nr, uint64_t rf_tid, uint32_t py_node) {
  g_seq[static_cast<uint64_t>(seq_nr) % kSeqSlots] = SeqSlot{rf_tid, seq_nr, py_node};
}

// The forward Python context recorded for (forward thread, sequence number), or 0.
uint32_t forward_context(int64_t seq_nr, uint64_t fwd_tid) {
  const SeqSlot& slot = g_seq[static_cast<uint64_t>(seq_nr) % kSeqSlots];
  return (slot.seq == seq_nr && slot.tid == fwd_tid) ? slot.node : 0;
}

// Gives a parked wrapper its node: under the forward line of backward node `seq_nr` when known,
// else under its ordinary parent (caller holds the tree lock).
void resolve_pending(Tree& t, OpEntry& e, int64_t seq_nr, uint64_t fwd_tid) {
  uint32_t fwd = seq_nr >= 0 ? forward_context(seq_nr, fwd_tid) : 0;
  if (fwd != 0) {
    e.node = t.child(t.child(fwd, t.named_frame(Kind::Marker, "backward")), e.frame);
    e.py_node = fwd;
    e.seq_nr = seq_nr;
  } else {
    e.node = t.child(e.node, e.frame);
  }
  e.pending = false;
}

}  // namespace

void start(const Options& opts) {
  Tree& t = tree();
  m_cpu_time = t.metric_id("cpu.time");
  m_op_time = t.metric_id("op.time");
  m_op_count = t.metric_id("op.count");
  g_opts = opts;
  g_epoch.fetch_add(1);
  if (g_seq == nullptr) g_seq = new SeqSlot[kSeqSlots]();
  if (opts.native) {
    native::init();
    g_native_in_handler = std::strcmp(native::unwinder_name(), "libunwind") == 0;
  }
  if (opts.native) warm_native(this_thread());
  if (opts.sample) install_handler();
  g_enabled.store(true);
}

void stop() {
  g_enabled.store(false);
  std::lock_guard<std::mutex> g(registry_mu());
  for (ThreadState* s : all_threads()) {
    if (s->has_timer) {
      timer_delete(s->timer);
      s->has_timer = false;
    }
  }
}

bool is_enabled() { return g_enabled.load(std::memory_order_relaxed); }

void set_paused(bool paused) { g_enabled.store(!paused); }

void reset_metrics() {
  Tree& t = tree();
  std::lock_guard<std::mutex> g(t.mu);
  drain_all_locked();
  for (auto& n : t.nodes) std::fill(n.metrics.begin(), n.metrics.end(), 0.0);
}

void register_current_thread() {
  ThreadState* s = this_thread();
  warm_native(s);
  clockid_t c;
  if (g_enabled.load() && !s->has_timer && pthread_getcpuclockid(pthread_self(), &c) == 0)
    arm_timer(s, c);
}

void register_thread(unsigned long pthread_id, pid_t tid) {
  ThreadState* s = get_or_make(tid);
  clockid_t c;
  if (g_enabled.load() && pthread_getcpuclockid(static_cast<pthread_t>(pthread_id), &c) == 0)
    arm_timer(s, c);
}

void register_native_thread(pid_t tid, const std::string& name) {
  if (tid <= 0 || lookup(tid) != nullptr || !g_enabled.load()) return;
  ThreadState* s = get_or_make(tid);
  {
    Tree& t = tree();
    std::lock_guard<std::mutex> g(t.mu);
    s->thread_node = t.child(0, t.named_frame(Kind::Thread, name));
  }
  // The kernel's CPU clock of a thread by id (MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)).
  auto clock = static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 6);
  arm_timer(s, clock);
}

void register_thread_if_new(unsigned long pthread_id, pid_t tid) {
  if (tid > 0 && lookup(tid) == nullptr) register_thread(pthread_id, tid);
}

void op_enter(const char* name, uint64_t handle, int64_t seq_nr, uint64_t rf_tid,
              uint64_t fwd_tid, bool is_backward) {
  if (!g_enabled.load(std::memory_order_relaxed) || !g_opts.ops) return;
  ThreadState* s = this_thread();
  int d = s->depth.load(std::memory_order_relaxed);
  const uint32_t epoch = g_epoch.load(std::memory_order_relaxed);
  if (d > 0 && s->ops[d - 1].epoch != epoch) {
    d = 0;
    s->overflow = 0;
    s->depth.store(0, std::memory_order_release);
  }
  if (d >= kMaxOpDepth) {
    ++s->overflow;
    return;
  }
  dc_raw_frame buf[kMaxPyDepth];
  int n = g_opts.python ? dc_walk_python(dc_this_thread_state(), buf, kMaxPyDepth) : 0;
  uintptr_t ips[kMaxNative];
  int n_ips = g_opts.native ? native::backtrace(ips, kMaxNative, 1) : 0;
  if (g_opts.native) mark_native_ready(s);
  OpEntry* top = d > 0 ? &s->ops[d - 1] : nullptr;
  const bool wrapper = is_engine_wrapper(name);
  const bool backward_node = seq_nr >= 0 && (is_backward || wrapper);
  Tree& t = tree();
  uint32_t node, frame, py_node = 0;
  int cut = -1;
  bool pending = false;
  const uint64_t key = g_opts.native ? native_key(ips, n_ips, buf, n, top, name) : 0;
  ThreadState::NativeMemo* memo = memo_slot(s, key);
  const bool memo_hit = memo && memo->key == key;
  if (fast_context(s, buf, n, top, name, wrapper || backward_node, memo_hit ? memo : nullptr,
                   &node, &frame, &py_node, &cut)) {
    // Every piece of this context is in the thread's caches: the tree is not touched.
    if (seq_nr >= 0 && !backward_node) remember_forward(seq_nr, rf_tid, py_node);
  } else {
    std::lock_guard<std::mutex> g(t.mu);
    if (s->head.load(std::memory_order_relaxed) != s->tail.load(std::memory_order_relaxed))
      drain_locked(t, s);
    if (top && top->pending) resolve_pending(t, *top, backward_node ? seq_nr : -1, fwd_tid);
    uint32_t parent = UINT32_MAX;
    if (backward_node && !(top && top->seq_nr == seq_nr)) {
      uint32_t fwd = forward_context(seq_nr, fwd_tid);
      if (fwd != 0) {
        py_node = fwd;
        parent = t.child(fwd, t.named_frame(Kind::Marker, "backward"));
      }
    }
    NativePlace np;
    Describer live;
    if (parent == UINT32_MAX && memo_hit) {
      parent = memo->node;
      py_node = top ? top->py_node : memo->py_node;
      cut = memo->cut;
    } else if (parent == UINT32_MAX && native_place(t, live, ips, n_ips, buf, n, top, name, &np)) {
      parent = np.node;
      py_node = np.py_node;
      cut = np.cut;
      *memo = ThreadState::NativeMemo{key, np.node, np.py_node, np.cut};
    }
    if (parent == UINT32_MAX) {
      parent = top ? node_for(t, live, s, buf, n, true, top->node, top->py_node, top->py_frame,
                              &py_node)
                   : node_for(t, live, s, buf, n, false, 0, 0, nullptr, &py_node);
    }
    frame = op_frame(t, s, name);
    // An engine wrapper without a sequence number learns its forward line from the backward
    // node it runs next; until then it is parked on its ordinary parent.
    pending = wrapper && seq_nr < 0;
    node = pending ? parent : op_child(t, s, parent, frame);
    // Without an exit report (dispatch tier), the last op to see a number is the best guess
    // for the one that created the autograd node; with one, op_exit records it exactly.
    if (!backward_node && seq_nr >= 0) remember_forward(seq_nr, rf_tid, py_node);
  }
  OpEntry& e = s->ops[d];
  e.node = node;
  e.frame = frame;
  e.pending = pending;
  e.py_node = py_node;
  e.py_frame = n > 0 ? buf[0].frame : nullptr;
  e.handle = handle;
  e.seq_nr = backward_node ? seq_nr : (top ? top->seq_nr : -1);
  e.child_ns = 0;
  e.native_cut = cut;
  e.epoch = epoch;
  e.fwd_seq = backward_node ? -1 : seq_nr;
  e.rf_tid = rf_tid;
  e.scope = false;
  e.t0_ns = now_ns();
  s->depth.store(d + 1, std::memory_order_release);
  if (g_observer) g_observer(name, 0, node);
}

void op_exit(uint64_t handle, int seq_consumed) {
  ThreadState* s = t_state;
  if (s == nullptr) return;
  if (s->overflow > 0) {
    --s->overflow;
    return;
  }
  int d = s->depth.load(std::memory_order_relaxed);
  if (d == 0 || s->ops[d - 1].handle != handle) return;
  OpEntry& e = s->ops[d - 1];
  int64_t elapsed = now_ns() - e.t0_ns;
  s->depth.store(d - 1, std::memory_order_release);
  if (e.scope) {  // the ops inside a scope are nested ops of the op around it
    if (d >= 2) s->ops[d - 2].child_ns += e.child_ns;
    return;
  }
  if (d >= 2) s->ops[d - 2].child_ns += elapsed;
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  Tree& t = tree();
  {
    std::lock_guard<std::mutex> g(t.mu);
    if (e.pending) resolve_pending(t, e, -1, 0);
    if (seq_consumed == 1 && e.fwd_seq >= 0) remember_forward(e.fwd_seq, e.rf_tid, e.py_node);
    t.add(e.node, m_op_time, (elapsed - e.child_ns) * 1e-9);
    t.add(e.node, m_op_count, 1.0);
  }
  if (g_observer) g_observer(nullptr, 1, e.node);
}

void scope_enter(Kind kind, const char* name, const char* extra, uint64_t handle, int skip_py) {
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  ThreadState* s = this_thread();
  int d = s->depth.load(std::memory_order_relaxed);
  const uint32_t epoch = g_epoch.load(std::memory_order_relaxed);
  if (d > 0 && s->ops[d - 1].epoch != epoch) {
    d = 0;
    s->overflow = 0;
    s->depth.store(0, std::memory_order_release);
  }
  if (d >= kMaxOpDepth) {
    ++s->overflow;
    return;
  }
  dc_raw_frame buf[kMaxPyDepth];
  int n = g_opts.python ? dc_walk_python(dc_this_thread_state(), buf, kMaxPyDepth) : 0;
  const int skip = std::min(std::max(skip_py, 0), n);
  std::memmove(buf, buf + skip, sizeof(dc_raw_frame) * (n - skip));
  n -= skip;
  OpEntry* top = d > 0 ? &s->ops[d - 1] : nullptr;
  Tree& t = tree();
  uint32_t node, frame, py_node = 0;
  {
    std::lock_guard<std::mutex> g(t.mu);
    if (s->head.load(std::memory_order_relaxed) != s->tail.load(std::memory_order_relaxed))
      drain_locked(t, s);
    if (top && top->pending) resolve_pending(t, *top, -1, 0);
    Describer live;
    uint32_t parent = top ? node_for(t, live, s, buf, n, true, top->node, top->py_node,
                                     top->py_frame, &py_node)
                          : node_for(t, live, s, buf, n, false, 0, 0, nullptr, &py_node);
    frame = t.named_frame(kind, name, extra);
    node = t.child(parent, frame);
  }
  OpEntry& e = s->ops[d];
  e = OpEntry{};
  e.node = node;
  e.frame = frame;
  e.py_node = py_node;
  e.py_frame = n > 0 ? buf[0].frame : nullptr;
  e.handle = handle;
  e.seq_nr = top ? top->seq_nr : -1;
  e.native_cut = -1;
  e.epoch = epoch;
  e.fwd_seq = -1;
  e.scope = true;
  e.t0_ns = now_ns();
  s->depth.store(d + 1, std::memory_order_release);
}

uint32_t current_node() {
  ThreadState* s = this_thread();
  int d = s->depth.load(std::memory_order_relaxed);
  // Inside an operator with no Python frame newer than it (an allocation or a launch inside an
  // op, the common case): the op's own node, without the tree lock or a full walk.
  if (d > 0 && !g_opts.native && !s->ops[d - 1].pending) {
    dc_raw_frame inner[1];
    int k = g_opts.python ? dc_walk_python(dc_this_thread_state(), inner, 1) : 0;
    if ((k > 0 ? inner[0].frame : nullptr) == s->ops[d - 1].py_frame) return s->ops[d - 1].node;
  }
  dc_raw_frame buf[kMaxPyDepth];
  int n = g_opts.python ? dc_walk_python(dc_this_thread_state(), buf, kMaxPyDepth) : 0;
  uintptr_t ips[kMaxNative];
  int n_ips = g_opts.native ? native::backtrace(ips, kMaxNative, 1) : 0;
  if (g_opts.native) mark_native_ready(s);
  const OpEntry* top = d > 0 ? &s->ops[d - 1] : nullptr;
  const uint64_t key = g_opts.native ? native_key(ips, n_ips, buf, n, top, nullptr) : 0;
  ThreadState::NativeMemo* memo = memo_slot(s, key);
  if (memo && memo->key == key) return memo->node;
  Tree& t = tree();
  std::lock_guard<std::mutex> g(t.mu);
  Describer live;
  NativePlace np;
  if (native_place(t, live, ips, n_ips, buf, n, top, nullptr, &np)) {
    *memo = ThreadState::NativeMemo{key, np.node, np.py_node, np.cut};
    return np.node;
  }
  if (top != nullptr)
    return node_for(t, live, s, buf, n, true, top->node, top->py_node, top->py_frame, nullptr);
  return node_for(t, live, s, buf, n, false, 0, 0, nullptr, nullptr);
}

uint32_t child_node(uint32_t parent, int kind, const char* name, const char* extra) {
  Tree& t = tree();
  std::lock_guard<std::mutex> g(t.mu);
  if (parent >= t.nodes.size()) parent = 0;
  return t.child(parent, t.named_frame(static_cast<Kind>(kind), name ? name : "",
                                       extra ? extra : ""));
}

void add_metric(uint32_t node, uint32_t metric, double value) {
  Tree& t = tree();
  std::lock_guard<std::mutex> g(t.mu);
  if (node < t.nodes.size()) t.add(node, metric, value);
}

uint32_t metric_id(const char* name) { return tree().metric_id(name); }

void add_note(const std::string& text) {
  std::lock_guard<std::mutex> g(g_notes_mu);
  for (const auto& n : g_notes)
    if (n == text) return;
  g_notes.push_back(text);
}

std::string notes_joined() {
  std::lock_guard<std::mutex> g(g_notes_mu);
  std::string out;
  for (const auto& n : g_notes) out.append(n).push_back('\n');
  return out;
}

void drain_all_locked() {
  std::lock_guard<std::mutex> g(registry_mu());
  for (ThreadState* s : all_threads()) drain_locked(tree(), s);
}

uint64_t dropped_samples() {
  std::lock_guard<std::mutex> g(registry_mu());
  uint64_t total = 0;
  for (ThreadState* s : all_threads()) total += s->dropped.load();
  return total;
}

void set_op_observer(OpObserver obs) { g_observer = obs; }

}  // namespace dc
