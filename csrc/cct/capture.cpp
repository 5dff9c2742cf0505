#include "capture.h"

#include "../callpath/native_stack.h"

#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

namespace dc {


namespace {

std::atomic<bool> g_enabled{false};
Options g_opts;
int g_magic;  // its address tags our timer signals
struct sigaction g_old_action;
bool g_handler_installed = false;
bool g_native_in_handler = false;  // libunwind (async-signal-safe) unwinds in the sampler too
OpObserver g_observer = nullptr;

uint32_t m_cpu_time, m_op_time, m_op_count;

// Thread registry: tid -> state, readable lock-free from the signal handler.
constexpr int kSlots = 8192;
std::atomic<ThreadState*> g_slots[kSlots];
std::mutex g_registry_mu;
std::vector<ThreadState*> g_threads;  // every state ever made, for drains and stop()
thread_local ThreadState* t_state = nullptr;

std::mutex g_notes_mu;
std::vector<std::string> g_notes;

// Backward context: (forward thread, sequence number) -> forward Python node. Direct-mapped and
// bounded: sequence numbers grow forever, and a backward pass only looks at recent ones.
constexpr uint64_t kSeqSlots = 1 << 18;
struct SeqSlot {
  uint64_t tid;
  int64_t seq;
  uint32_t node;
};
SeqSlot* g_seq = nullptr;

pid_t gettid_() { return static_cast<pid_t>(syscall(SYS_gettid)); }

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Slots of exited threads hold the tombstone, so probe chains through them stay intact.
ThreadState g_tombstone;
ThreadState* const kTombstone = &g_tombstone;
std::vector<ThreadState*> g_free;  // states of exited threads, reused by new ones

ThreadState* lookup(pid_t tid) {
  unsigned h = static_cast<unsigned>(tid) % kSlots;
  for (int i = 0; i < kSlots; ++i) {
    ThreadState* s = g_slots[(h + i) % kSlots].load(std::memory_order_acquire);
    if (s == nullptr) return nullptr;
    if (s != kTombstone && s->tid == tid) return s;
  }
  return nullptr;
}

void insert_slot(ThreadState* s) {
  unsigned h = static_cast<unsigned>(s->tid) % kSlots;
  for (int i = 0; i < kSlots; ++i) {
    auto& slot = g_slots[(h + i) % kSlots];
    ThreadState* cur = slot.load();
    if (cur == nullptr || cur == kTombstone) {
      slot.store(s, std::memory_order_release);
      return;
    }
  }
}

void remove_slot(ThreadState* s) {
  unsigned h = static_cast<unsigned>(s->tid) % kSlots;
  for (int i = 0; i < kSlots; ++i) {
    auto& slot = g_slots[(h + i) % kSlots];
    ThreadState* cur = slot.load();
    if (cur == nullptr) return;
    if (cur == s) {
      slot.store(kTombstone, std::memory_order_release);
      return;
    }
  }
}

ThreadState* get_or_make(pid_t tid) {
  ThreadState* s = lookup(tid);
  if (s) return s;
  std::lock_guard<std::mutex> g(g_registry_mu);
  if ((s = lookup(tid))) return s;
  if (!g_free.empty()) {
    s = g_free.back();
    g_free.pop_back();
    s->depth.store(0);
    s->overflow = 0;
    s->head.store(0);
    s->tail.store(0);
    s->cache_n = 0;
  } else {
    s = new ThreadState();
    s->ring = new Sample[kRing];
    g_threads.push_back(s);
  }
  s->tid = tid;
  insert_slot(s);
  return s;
}

void drain_locked(Tree& t, ThreadState* s);

// Memory stays bounded under thread churn (a pin-memory thread per epoch, a thread per request):
// an exiting thread's state, its buffered samples folded in, is reused by the next new thread.
void release_thread(ThreadState* s) {
  if (s == nullptr) return;
  if (s->has_timer) {
    timer_delete(s->timer);
    s->has_timer = false;
  }
  {
    std::lock_guard<std::mutex> g(tree().mu);
    drain_locked(tree(), s);
  }
  std::lock_guard<std::mutex> g(g_registry_mu);
  remove_slot(s);
  s->tid = 0;
  g_free.push_back(s);
}

struct ThreadExit {
  ~ThreadExit() {
    release_thread(t_state);
    t_state = nullptr;
  }
};
thread_local ThreadExit t_exit;

void arm_timer(ThreadState* s, clockid_t clock) {
  if (s->has_timer || !g_opts.sample) return;
  struct sigevent sev;
  std::memset(&sev, 0, sizeof(sev));
  sev.sigev_notify = SIGEV_THREAD_ID;
  sev.sigev_signo = SIGPROF;
  sev.sigev_value.sival_ptr = &g_magic;
#ifdef sigev_notify_thread_id
  sev.sigev_notify_thread_id = s->tid;
#else
  sev._sigev_un._tid = s->tid;
#endif
  if (timer_create(clock, &sev, &s->timer) != 0) return;
  struct itimerspec its;
  auto ns = static_cast<long>(g_opts.sample_interval * 1e9);
  its.it_interval.tv_sec = ns / 1000000000L;
  its.it_interval.tv_nsec = ns % 1000000000L;
  its.it_value = its.it_interval;
  if (timer_settime(s->timer, 0, &its, nullptr) != 0) {
    timer_delete(s->timer);
    return;
  }
  s->has_timer = true;
}

ThreadState* this_thread() {
  ThreadState* s = t_state;
  if (s) return s;
  s = get_or_make(gettid_());
  t_state = s;
  (void)&t_exit;  // first use registers its destructor for this thread's exit
  if (g_enabled.load(std::memory_order_relaxed)) {
    clockid_t c;
    if (pthread_getcpuclockid(pthread_self(), &c) == 0) arm_timer(s, c);
  }
  return s;
}

// Where frame descriptions come from: the live stack (op path) or a sample's copies (drain).
struct Describer {
  const Sample* sample = nullptr;  // null: the frames are live on this thread
  uint32_t frame(Tree& t, const dc_raw_frame* buf, int i) const {
    if (sample == nullptr) return t.python_frame(buf[i], true);
    const CodeInfo* info = nullptr;
    for (int j = 0; j < sample->n_new; ++j)
      if (sample->new_index[j] == i) info = &sample->news[j];
    return t.python_frame(buf[i], false, info);
  }
};

// Python frames buf[from-1 .. 0] (outer to inner) under `base`.
uint32_t intern_under(Tree& t, const Describer& d, uint32_t base, const dc_raw_frame* buf,
                      int from) {
  uint32_t node = base;
  for (int i = from - 1; i >= 0; --i) node = t.child(node, d.frame(t, buf, i));
  return node;
}

// A full Python path from the root, reusing the longest common prefix with the last one.
uint32_t intern_full(Tree& t, const Describer& d, ThreadState* s, const dc_raw_frame* buf, int n) {
  uint32_t node = 0;
  if (n >= kMaxPyDepth) node = t.child(0, t.named_frame(Kind::Marker, "<truncated>"));
  if (s == nullptr) return intern_under(t, d, node, buf, n);
  int common = 0;
  while (common < n && common < s->cache_n) {
    const dc_raw_frame& a = buf[n - 1 - common];
    const dc_raw_frame& b = s->cache_frame[common];
    if (a.code != b.code || a.offset != b.offset || a.filename != b.filename ||
        a.firstlineno != b.firstlineno)
      break;
    ++common;
  }
  if (common > 0) node = s->cache_node[common - 1];
  for (int i = common; i < n; ++i) {
    node = t.child(node, d.frame(t, buf, n - 1 - i));
    s->cache_frame[i] = buf[n - 1 - i];
    s->cache_node[i] = node;
  }
  s->cache_n = n;
  return node;
}

// The context node for Python frames `buf` (innermost first) with `top` the innermost open op.
// Sets *py_node to the innermost Python node of that context.
uint32_t node_for(Tree& t, const Describer& d, ThreadState* cache, const dc_raw_frame* buf, int n,
                  bool has_op, uint32_t op_node, uint32_t op_py_node, const void* op_frame,
                  uint32_t* py_node) {
  if (!has_op) {
    uint32_t node = n > 0 ? intern_full(t, d, cache, buf, n) : 0;
    if (py_node) *py_node = node;
    return node;
  }
  int k = 0;  // frames newer than the op's own frame
  if (op_frame == nullptr) {
    k = n;
  } else {
    while (k < n && buf[k].frame != op_frame) ++k;
    if (k == n) k = 0;  // its frame is gone (should not happen): attach to the op itself
  }
  if (k == 0) {
    if (py_node) *py_node = op_py_node;
    return op_node;
  }
  uint32_t node = intern_under(t, d, op_node, buf, k);
  if (py_node) *py_node = node;
  return node;
}

// The context of an event with native frames spliced in; false when that does not apply (no
// native stack, stacks that cannot be paired, or Python frames newer than the open operator),
// and the caller takes the Python-only path.
bool native_place(Tree& t, const Describer& d, const uintptr_t* ips, int n_ips,
                  const dc_raw_frame* buf, int n, const OpEntry* top, const char* op_name,
                  NativePlace* out) {
  if (n_ips <= 0) return false;
  if (top == nullptr) {
    *out = place_top_level(t, ips, n_ips, buf, n, [&](int i) { return d.frame(t, buf, i); },
                           op_name);
    return out->spliced;
  }
  if ((n > 0 ? buf[0].frame : nullptr) != top->py_frame) return false;
  *out = place_nested(t, top->node, top->native_cut, ips, n_ips, op_name);
  out->py_node = top->py_node;
  return out->spliced;
}

uint32_t op_frame(Tree& t, ThreadState* s, const char* name) {
  auto& e = s->op_names[(reinterpret_cast<uintptr_t>(name) >> 3) & 255];
  if (e.ptr == name && e.text == name) return e.frame;
  e.frame = t.named_frame(Kind::Op, name);
  e.ptr = name;
  e.text = name;
  return e.frame;
}

// The autograd engine's "autograd::engine::evaluate_function: <node>" scope wraps each backward
// node and the gradient bookkeeping after it; it belongs with that node under the forward line.
bool is_engine_wrapper(const char* name) {
  static const char kWrapper[] = "autograd::engine::evaluate_function: ";
  return std::strncmp(name, kWrapper, sizeof(kWrapper) - 1) == 0;
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

void drain_locked(Tree& t, ThreadState* s) {
  bool expected = false;
  if (!s->draining.compare_exchange_strong(expected, true)) return;
  uint32_t tail = s->tail.load(std::memory_order_relaxed);
  uint32_t head = s->head.load(std::memory_order_acquire);
  for (; tail != head; ++tail) {
    const Sample& smp = s->ring[tail % kRing];
    Describer d{&smp};
    OpEntry top{};
    top.node = smp.op_node;
    top.py_node = smp.op_py_node;
    top.py_frame = smp.op_frame;
    top.native_cut = smp.op_native_cut;
    NativePlace np;
    uint32_t node =
        native_place(t, d, smp.ips, smp.n_ips, smp.frames, smp.n, smp.has_op ? &top : nullptr,
                     nullptr, &np)
            ? np.node
            : node_for(t, d, nullptr, smp.frames, smp.n, smp.has_op, smp.op_node,
                       smp.op_py_node, smp.op_frame, nullptr);
    t.add(node, m_cpu_time, smp.weight * g_opts.sample_interval);
  }
  s->tail.store(tail, std::memory_order_release);
  s->draining.store(false);
}

void on_sigprof(int sig, siginfo_t* info, void* uctx) {
  if (info == nullptr || info->si_code != SI_TIMER || info->si_value.sival_ptr != &g_magic) {
    // Not ours: chain to whatever handler was there before.
    if (g_old_action.sa_flags & SA_SIGINFO) {
      if (g_old_action.sa_sigaction) g_old_action.sa_sigaction(sig, info, uctx);
    } else if (g_old_action.sa_handler != SIG_DFL && g_old_action.sa_handler != SIG_IGN) {
      g_old_action.sa_handler(sig);
    }
    return;
  }
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  int saved_errno = errno;
  ThreadState* s = lookup(gettid_());
  if (s != nullptr && s->ring != nullptr) {
    uint32_t head = s->head.load(std::memory_order_relaxed);
    if (head - s->tail.load(std::memory_order_acquire) >= kRing) {
      s->dropped.fetch_add(1, std::memory_order_relaxed);
    } else {
      Sample& smp = s->ring[head % kRing];
      int overrun = timer_getoverrun(s->timer);
      smp.weight = 1 + (overrun > 0 ? overrun : 0);
      int d = s->depth.load(std::memory_order_acquire);
      smp.has_op = d > 0;
      if (d > 0) {
        const OpEntry& top = s->ops[d - 1];
        smp.op_node = top.node;
        smp.op_py_node = top.py_node;
        smp.op_frame = top.py_frame;
        smp.op_native_cut = top.native_cut;
      }
      // skip 2: this handler and the kernel's signal trampoline.
      smp.n_ips = g_native_in_handler ? native::backtrace(smp.ips, kMaxNative, 2) : 0;
      smp.n = g_opts.python ? dc_walk_python(dc_this_thread_state(), smp.frames, kMaxPyDepth) : 0;
      // Describe first sightings now, while their code objects are certainly alive.
      smp.n_new = 0;
      for (int i = 0; i < smp.n && smp.n_new < kMaxNew; ++i) {
        if (known_python_key(python_key(smp.frames[i]))) continue;
        CodeInfo& ci = smp.news[smp.n_new];
        ci.line = dc_describe_code(smp.frames[i].code, smp.frames[i].offset, ci.file,
                                   sizeof(ci.file), ci.name, sizeof(ci.name));
        smp.new_index[smp.n_new++] = i;
      }
      s->head.store(head + 1, std::memory_order_release);
    }
  }
  errno = saved_errno;
}

void install_handler() {
  if (g_handler_installed) return;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_sigprof;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  // Never restored: a timer signal still in flight after stop() must not hit SIG_DFL (which
  // terminates the process). Disabled, the handler returns at once.
  if (sigaction(SIGPROF, &sa, &g_old_action) == 0) g_handler_installed = true;
}

}  // namespace

void start(const Options& opts) {
  Tree& t = tree();
  m_cpu_time = t.metric_id("cpu.time");
  m_op_time = t.metric_id("op.time");
  m_op_count = t.metric_id("op.count");
  g_opts = opts;
  if (g_seq == nullptr) g_seq = new SeqSlot[kSeqSlots]();
  if (opts.native) {
    native::init();
    g_native_in_handler = std::strcmp(native::unwinder_name(), "libunwind") == 0;
  }
  if (opts.sample) install_handler();
  g_enabled.store(true);
}

void stop() {
  g_enabled.store(false);
  std::lock_guard<std::mutex> g(g_registry_mu);
  for (ThreadState* s : g_threads) {
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

void op_enter(const char* name, uint64_t handle, int64_t seq_nr, uint64_t rf_tid,
              uint64_t fwd_tid, bool is_backward) {
  if (!g_enabled.load(std::memory_order_relaxed) || !g_opts.ops) return;
  ThreadState* s = this_thread();
  int d = s->depth.load(std::memory_order_relaxed);
  if (d >= kMaxOpDepth) {
    ++s->overflow;
    return;
  }
  dc_raw_frame buf[kMaxPyDepth];
  int n = g_opts.python ? dc_walk_python(dc_this_thread_state(), buf, kMaxPyDepth) : 0;
  uintptr_t ips[kMaxNative];
  int n_ips = g_opts.native ? native::backtrace(ips, kMaxNative, 1) : 0;
  OpEntry* top = d > 0 ? &s->ops[d - 1] : nullptr;
  const bool wrapper = is_engine_wrapper(name);
  const bool backward_node = seq_nr >= 0 && (is_backward || wrapper);
  Tree& t = tree();
  uint32_t node, frame, py_node = 0;
  int cut = -1;
  bool pending;
  {
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
    if (parent == UINT32_MAX && native_place(t, live, ips, n_ips, buf, n, top, name, &np)) {
      parent = np.node;
      py_node = np.py_node;
      cut = np.cut;
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
    node = pending ? parent : t.child(parent, frame);
    if (!backward_node && seq_nr >= 0) {
      SeqSlot& slot = g_seq[static_cast<uint64_t>(seq_nr) % kSeqSlots];
      // The last op to see a sequence number is the one that created the autograd node: ops
      // that create none (no grad-requiring input) only peek at the number it will get.
      slot = SeqSlot{rf_tid, seq_nr, py_node};
    }
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
  e.t0_ns = now_ns();
  s->depth.store(d + 1, std::memory_order_release);
  if (g_observer) g_observer(name, 0, node);
}

void op_exit(uint64_t handle) {
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
  if (d >= 2) s->ops[d - 2].child_ns += elapsed;
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  Tree& t = tree();
  {
    std::lock_guard<std::mutex> g(t.mu);
    if (e.pending) resolve_pending(t, e, -1, 0);
    t.add(e.node, m_op_time, (elapsed - e.child_ns) * 1e-9);
    t.add(e.node, m_op_count, 1.0);
  }
  if (g_observer) g_observer(nullptr, 1, e.node);
}

uint32_t current_node() {
  ThreadState* s = this_thread();
  dc_raw_frame buf[kMaxPyDepth];
  int n = g_opts.python ? dc_walk_python(dc_this_thread_state(), buf, kMaxPyDepth) : 0;
  int d = s->depth.load(std::memory_order_relaxed);
  uintptr_t ips[kMaxNative];
  int n_ips = g_opts.native ? native::backtrace(ips, kMaxNative, 1) : 0;
  Tree& t = tree();
  std::lock_guard<std::mutex> g(t.mu);
  Describer live;
  NativePlace np;
  if (native_place(t, live, ips, n_ips, buf, n, d > 0 ? &s->ops[d - 1] : nullptr, nullptr, &np))
    return np.node;
  if (d > 0) {
    const OpEntry& top = s->ops[d - 1];
    return node_for(t, live, s, buf, n, true, top.node, top.py_node, top.py_frame, nullptr);
  }
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
  std::lock_guard<std::mutex> g(g_registry_mu);
  for (ThreadState* s : g_threads) drain_locked(tree(), s);
}

uint64_t dropped_samples() {
  std::lock_guard<std::mutex> g(g_registry_mu);
  uint64_t total = 0;
  for (ThreadState* s : g_threads) total += s->dropped.load();
  return total;
}

void set_op_observer(OpObserver obs) { g_observer = obs; }

}  // namespace dc
