// The CPU-time sampler: one CLOCK_THREAD_CPUTIME timer per thread, a SIGPROF handler that only
// reads (Python frames, the operator stack top, native return addresses) into the thread's ring,
// and the drain that folds the ring into the tree.
#include <errno.h>
#include <link.h>
#include <signal.h>
#include <ucontext.h>

#include <cstdlib>
#include <cstring>

#include "../callpath/native_stack.h"
#include "capture_internal.h"

namespace dc::detail {

bool g_native_in_handler = false;  // libunwind (async-signal-safe) unwinds in the handler too

namespace {
int g_magic;  // its address tags our timer signals

// Executable code of the allocator's library (libc, or an interposed malloc): a thread
// interrupted there may hold malloc's lock, so its first unwind (which mallocs libunwind's TLS)
// must wait for another sample. Found once, outside the handler.
uintptr_t g_alloc_lo = 0, g_alloc_hi = 0;

void find_allocator_code() {
  if (g_alloc_hi != 0) return;
  struct Range {
    uintptr_t target, lo, hi;
  } r{reinterpret_cast<uintptr_t>(&malloc), 0, 0};
  // The executable segment that holds malloc (dl_iterate_phdr: outside the handler only).
  dl_iterate_phdr(
      [](dl_phdr_info* obj, size_t, void* data) {
        auto* r = static_cast<Range*>(data);
        for (int i = 0; i < obj->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = obj->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
          uintptr_t lo = obj->dlpi_addr + ph.p_vaddr;
          if (r->target >= lo && r->target < lo + ph.p_memsz) {
            r->lo = lo;
            r->hi = lo + ph.p_memsz;
            return 1;
          }
        }
        return 0;
      },
      &r);
  g_alloc_lo = r.lo;
  g_alloc_hi = r.hi;
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

// May this sample unwind? Always once the thread has unwound before; the first time only if
// it was interrupted outside the allocator (so the TLS malloc cannot wait on its own lock).
bool may_unwind(ThreadState* s, const void* uctx) {
  if (!g_native_in_handler) return false;
  if (s->native_ready.load(std::memory_order_acquire)) return true;
  uintptr_t pc = uctx ? interrupted_pc(uctx) : 0;
  return pc != 0 && g_alloc_hi > g_alloc_lo && (pc < g_alloc_lo || pc >= g_alloc_hi);
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
  ThreadState* s = lookup(gettid_());
  if (s != nullptr && s->ring != nullptr) {
    uint32_t head = s->head.load(std::memory_order_relaxed);
    if (head - s->tail.load(std::memory_order_acquire) >= kRing) {
      s->dropped.fetch_add(1, std::memory_order_relaxed);
    } else {
      Sample& smp = s->ring[head % kRing];
      int overrun = timer_getoverrun(s->timer);
      smp.weight = 1 + (overrun > 0 ? overrun : 0);
      perf::read_deltas(&s->perf, &smp.perf);
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
      smp.n_ips = may_unwind(s, uctx) ? native::backtrace(smp.ips, kMaxNative, 2) : 0;
      if (smp.n_ips > 0) s->native_ready.store(true, std::memory_order_release);
      smp.n = g_opts.python
                  ? dc_walk_python_checked(dc_this_thread_state(), smp.frames, kMaxPyDepth)
                  : 0;
      // Describe first sightings now, while their code objects are certainly alive.
      smp.n_new = 0;
      for (int i = 0; i < smp.n && smp.n_new < kMaxNew; ++i) {
        if (known_python_key(python_key(smp.frames[i]))) continue;
        CodeInfo& ci = smp.news[smp.n_new];
        ci.line = dc_describe_code_checked(smp.frames[i].code, smp.frames[i].offset, ci.file,
                                   sizeof(ci.file), ci.name, sizeof(ci.name));
        smp.new_index[smp.n_new++] = i;
      }
      s->head.store(head + 1, std::memory_order_release);
    }
  }
  errno = saved_errno;
}

}  // namespace

void arm_timer(ThreadState* s, clockid_t clock) {
  if (s->has_timer || !g_opts.sample) return;
  perf::open_thread(&s->perf, s->tid);
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
    uint32_t node;
    if (smp.n == 0 && !smp.has_op && s->thread_node != 0)  // a worker outside Python and ops
      node = place_native_only(t, s->thread_node, smp.ips, smp.n_ips, /*leaf_is_pc=*/true);
    else if (native_place(t, d, smp.ips, smp.n_ips, smp.frames, smp.n,
                          smp.has_op ? &top : nullptr, nullptr, &np, /*leaf_is_pc=*/true))
      node = np.node;
    else
      node = node_for(t, d, nullptr, smp.frames, smp.n, smp.has_op, smp.op_node,
                      smp.op_py_node, smp.op_frame, nullptr);
    t.add(node, m_cpu_time, smp.weight * g_opts.sample_interval);
    perf::add_deltas(t, node, smp.perf);
  }
  s->tail.store(tail, std::memory_order_release);
  s->draining.store(false);
}

void install_handler() {
  find_allocator_code();
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
