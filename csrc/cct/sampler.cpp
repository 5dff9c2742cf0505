// The CPU-time sampler: one CLOCK_THREAD_CPUTIME timer per Signaled thread, a SIGPROF handler
// that only reads (Python frames, the operator stack top, native return addresses) and writes
// into the thread's own ring, and the drain that folds the ring into the tree (sampler thread).
#include <errno.h>
#include <gnu/libc-version.h>
#include <link.h>
#include <signal.h>
#include <sys/auxv.h>
#include <ucontext.h>

#include <cstdlib>
#include <cstring>

#include "../callpath/native_stack.h"
#include "../perf/perf_counters.h"
#include "capture_internal.h"
#include "registry.h"

namespace dc::detail {

bool g_native_in_handler = false;  // libunwind (async-signal-safe) unwinds in the handler too

namespace {
int g_magic;  // its address tags our timer signals

// Code where an interrupted thread may hold a lock that unwinding in the handler can need: the
// allocator's library (libc's malloc, or an interposed one), libc itself (an interposed
// allocator calls it with its own locks held) and the dynamic loader. libunwind keeps its cache
// in TLS, and libunwind is dlopen'ed, so every access goes through __tls_get_addr: after any
// dlopen of a library with TLS, a thread's next access may grow its DTV (realloc), and its very
// first one allocates its TLS block. Interrupted inside malloc, such a sample waited on the arena
// lock the thread itself held (a hang, 4 runs in 5 of tests/native/test_signal_stress.py's
// libraries with allocating constructors). So a sample that lands here keeps its Python and
// operator context and only its interrupted pc (its leaf function). Found once, outside the
// handler.
struct CodeRange {
  uintptr_t lo = 0, hi = 0;
};
constexpr int kRefusedObjects = 3;
CodeRange g_refused[kRefusedObjects];
bool g_refused_found = false;

void find_refused_code() {
  if (g_refused_found) return;
  struct Find {
    uintptr_t targets[kRefusedObjects];  // an address inside each object (0: none)
    CodeRange* out;
  } f{{reinterpret_cast<uintptr_t>(&malloc), reinterpret_cast<uintptr_t>(&gnu_get_libc_version),
       static_cast<uintptr_t>(getauxval(AT_BASE))},
      g_refused};
  // (the loader's target is its load base, matched by object below; the others by segment)
  dl_iterate_phdr(  // outside the handler only
      [](dl_phdr_info* obj, size_t, void* data) {
        auto* f = static_cast<Find*>(data);
        for (int i = 0; i < obj->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = obj->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
          uintptr_t lo = obj->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
          for (int k = 0; k < kRefusedObjects; ++k) {
            uintptr_t t = f->targets[k];
            bool loader = k == kRefusedObjects - 1;
            if (t != 0 && (loader ? obj->dlpi_addr == t : (t >= lo && t < hi)))
              f->out[k] = CodeRange{lo, hi};
          }
        }
        return 0;
      },
      &f);
  g_refused_found = true;
}

uintptr_t interrupted_pc(const void* uctx) {
  const auto* uc = static_cast<const ucontext_t*>(uctx);
#if defined(__x86_64__)
  return static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
  return static_cast<uintptr_t>(uc->uc_mcontext.pc);
#else
  (void)uc;
  return 0;
#endif
}

// May a sample at `pc` unwind? Only outside the refused code: on every sample, not just a
// thread's first, since any dlopen can make the next TLS access allocate.
bool may_unwind(uintptr_t pc) {
  if (!g_refused_found) return false;
  for (const CodeRange& r : g_refused)
    if (pc >= r.lo && pc < r.hi) return false;
  return true;
}

// Extra per-sample counters (set_sample_counters in capture.h).
SampleCounterFn g_counter_fn = nullptr;
uint32_t g_counter_metrics[kMaxSampleCounters];
std::atomic<int> g_n_counters{0};

// Copies a Python string description into the sample's text pool; false when it does not fit
// whole (the frame is then described by a later sample).
bool pool_text(Sample& smp, const dc_raw_frame& f, Sample::New* out) {
  int room = kSampleText - smp.text_used;
  if (room < 64) return false;
  char* file = smp.text + smp.text_used;
  // Both strings in the remaining room: file first, then name after it.
  int half = room / 2;
  char* name = file + half;
  out->line = dc_describe_code_checked(f.code, f.offset, file, half, name, room - half);
  int fl = static_cast<int>(std::strlen(file)), nl = static_cast<int>(std::strlen(name));
  // Possibly cut: describe it in a later sample with the whole pool, unless this is one (then
  // it is longer than 4 KB, and an exact prefix is what is kept).
  if ((fl >= half - 1 || nl >= room - half - 1) && smp.text_used > 0) return false;
  std::memmove(file + fl + 1, name, static_cast<size_t>(nl) + 1);
  out->file = static_cast<uint16_t>(smp.text_used);
  out->name = static_cast<uint16_t>(smp.text_used + fl + 1);
  smp.text_used += fl + nl + 2;
  return true;
}

// The sample itself (noinline: the unwind skips its frame): plain reads of this thread's own
// state and stack, plain writes into `smp`.
__attribute__((noinline)) void take_sample(ThreadState* s, Sample& smp, void* uctx) {
  smp.epoch = g_epoch.load(std::memory_order_relaxed);
  int overrun = timer_getoverrun(s->timer);
  smp.weight = 1 + (overrun > 0 ? overrun : 0);
  int d = s->depth.load(std::memory_order_acquire);
  smp.has_op = d > 0 && s->ops[d - 1].epoch == smp.epoch;
  if (smp.has_op) {
    const OpEntry& top = s->ops[d - 1];
    smp.op_node = top.node;
    smp.op_py_node = top.py_node;
    smp.op_frame = top.py_frame;
    smp.op_anchor = top.anchor;
    smp.op_native_cut = top.native_cut;
  }
  // Native frames: the whole unwind where it may, else the interrupted pc alone (its function
  // still names where the time went: memcpy, malloc, the loader's symbol lookups).
  const uintptr_t pc = g_native_in_handler && uctx ? interrupted_pc(uctx) : 0;
  smp.pc_only = pc != 0 && !may_unwind(pc);
  if (smp.pc_only) {
    smp.ips[0] = pc;
    smp.n_ips = 1;
  } else {
    // skip 3: this function, the handler and the kernel's signal trampoline.
    smp.n_ips = pc != 0 ? native::backtrace(smp.ips, kMaxNative, 3) : 0;
  }
  // (the frames' fingerprints go into `keys` first, each then becomes its frame's key)
  smp.n = g_opts.python ? dc_walk_python_sampled(dc_this_thread_state(), smp.frames, smp.keys,
                                                 kMaxPyDepth, s->code_memo)
                        : 0;
  // Keys and first sightings now, while the code objects are certainly alive.
  smp.n_new = 0;
  smp.text_used = 0;
  bool room = true;
  for (int i = 0; i < smp.n; ++i) {
    smp.keys[i] = python_key(smp.frames[i], smp.keys[i]);
    if (!room || smp.n_new >= kMaxNew || known_python_key(smp.keys[i])) continue;
    if (pool_text(smp, smp.frames[i], &smp.news[smp.n_new]))
      smp.new_index[smp.n_new++] = i;
    else
      room = false;
  }
  int nc = g_n_counters.load(std::memory_order_acquire);
  smp.n_counters = (nc > 0 && g_counter_fn != nullptr) ? g_counter_fn(smp.counters, nc) : 0;
}

struct sigaction g_old_action;
bool g_handler_installed = false;

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
  ThreadState* s = registry::lookup(registry::gettid_());
  // Only states in the armed phase own a timer; a state being reaped or recycled is left alone.
  if (s != nullptr && s->ring != nullptr && s->phase.load(std::memory_order_acquire) == Phase::Armed) {
    uint32_t head = s->head.load(std::memory_order_relaxed);
    if (head - s->tail.load(std::memory_order_acquire) >= kRing) {
      s->dropped.fetch_add(1, std::memory_order_relaxed);
    } else {
      take_sample(s, s->ring[head % kRing], uctx);
      s->head.store(head + 1, std::memory_order_release);
    }
  }
  errno = saved_errno;
}

}  // namespace

bool create_timer(ThreadState* s) {
  if (s->has_timer || !g_opts.sample) return s->has_timer;
  perf::open_for(s->tid);  // its CPU counters, when --perf is on (read at its samples)
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
  if (timer_create(s->clock, &sev, &s->timer) != 0) return false;
  if (!restart_timer(s->timer)) {
    timer_delete(s->timer);
    return false;
  }
  s->has_timer = true;
  return true;
}

void drop_pending_expiry(timer_t timer) {
  struct itimerspec cur;
  // Linux reports a timer whose expiry the thread's CPU time has passed, but whose signal the
  // next tick has yet to send, as 1 ns to go. Restarted, it counts a whole interval from now;
  // any other timer is left as it is, in phase.
  if (timer_gettime(timer, &cur) == 0 && cur.it_value.tv_sec == 0 && cur.it_value.tv_nsec <= 1)
    restart_timer(timer);
}

bool restart_timer(timer_t timer) {
  struct itimerspec its;
  auto ns = static_cast<long>(g_opts.sample_interval * 1e9);
  its.it_interval.tv_sec = ns / 1000000000L;
  its.it_interval.tv_nsec = ns % 1000000000L;
  its.it_value = its.it_interval;
  return timer_settime(timer, 0, &its, nullptr) == 0;
}

void delete_timer(ThreadState* s) {
  if (!s->has_timer) return;
  timer_delete(s->timer);
  s->has_timer = false;
}

uint32_t thread_node(const char* name) {
  TreeWriter t(tree());
  return t.child(0, t.named_frame(Kind::Thread, name));
}

void drain(ThreadState* s) {
  uint32_t tail = s->tail.load(std::memory_order_relaxed);
  const uint32_t head = s->head.load(std::memory_order_acquire);
  if (tail == head) return;
  const uint32_t epoch = g_epoch.load(std::memory_order_relaxed);
  // Symbols first, outside the tree lock (they read files the first time).
  if (g_opts.native)
    for (uint32_t i = tail; i != head; ++i) {
      const Sample& smp = s->ring[i % kRing];
      if (smp.epoch == epoch) native_warm_symbols(smp.ips, smp.n_ips, /*leaf_is_pc=*/true);
    }
  const double interval = g_opts.sample_interval;
  int nc = g_n_counters.load(std::memory_order_acquire);
  TreeWriter t(tree());
  for (; tail != head; ++tail) {
    const Sample& smp = s->ring[tail % kRing];
    if (smp.epoch != epoch) continue;  // taken in another session: not this profile's time
    Describer d{&smp};
    OpEntry top{};
    top.node = smp.op_node;
    top.py_node = smp.op_py_node;
    top.py_frame = smp.op_frame;
    top.anchor = smp.op_anchor;
    top.native_cut = smp.op_native_cut;
    NativePlace np;
    uint32_t node;
    if (smp.n == 0 && !smp.has_op && s->thread_node != 0)  // a worker outside Python and ops
      node = smp.pc_only ? s->thread_node
                         : place_native_only(t, s->thread_node, smp.ips, smp.n_ips,
                                             /*leaf_is_pc=*/true);
    else if (!smp.pc_only && native_place(t, d, smp.ips, smp.n_ips, smp.frames, smp.n,
                                          smp.has_op ? &top : nullptr, nullptr, &np,
                                          /*leaf_is_pc=*/true))
      node = np.node;
    else
      node = node_for(t, d, nullptr, smp.frames, smp.n, smp.has_op, smp.op_node,
                      smp.op_py_node, smp.op_frame, &smp.op_anchor, nullptr);
    // A Python thread caught with no frame (interpreter start-up and teardown, between the
    // bytecodes of nothing): a marker, since time on the root itself is no context at all and
    // the exporters, whose stacks start below the root, would drop it.
    if (node == 0) node = t.child(0, t.named_frame(Kind::Marker, "<no Python frame>"));
    // (after its context, whichever it is: the frames between are what was not unwound)
    if (smp.pc_only) node = place_leaf_only(t, node, smp.ips[0]);
    t.add(node, m_cpu_time, smp.weight * interval);
    for (int c = 0; c < smp.n_counters && c < nc; ++c)
      t.add(node, g_counter_metrics[c], static_cast<double>(smp.counters[c]));
  }
  s->tail.store(tail, std::memory_order_release);
}

void install_handler() {
  find_refused_code();
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


}  // namespace dc::detail

namespace dc {
void set_sample_counters(SampleCounterFn read, const uint32_t* metric_ids, int n) {
  using namespace detail;
  n = n < 0 ? 0 : (n > kMaxSampleCounters ? kMaxSampleCounters : n);
  g_n_counters.store(0, std::memory_order_release);
  for (int i = 0; i < n; ++i) g_counter_metrics[i] = metric_ids[i];
  g_counter_fn = read;
  g_n_counters.store(read != nullptr ? n : 0, std::memory_order_release);
}
}  // namespace dc
