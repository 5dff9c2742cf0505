// The sampler thread: the core's own upkeep, independent of the GIL and the Python flusher.
//  - every sample interval: Polled workers' CPU time, charged to the operator open on the
//    thread that most recently entered one ("<op> / [thread] worker"), else to the worker's
//    own "[thread] <name>";
//  - every 20 ms: every ring drained (a long C call holding the GIL loses no samples);
//  - every 100 ms, and as soon as the thread count changes: /proc/self/task scanned for new
//    threads, states of gone threads reaped;
//  - at stop, one last scan and poll, so a worker's time up to the end is charged.
// It blocks every signal, so no timer or process signal is ever delivered to it.
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>

#include <atomic>
#include <mutex>

#include "capture_internal.h"
#include "clock.h"
#include "registry.h"

namespace dc::detail {
namespace {

std::atomic<bool> g_stop{false};
bool g_running = false;  // start/stop hold the GIL; the fork child clears it
pthread_t g_thread;
bool g_atfork = false;

// Where a worker's time goes: under the innermost op open on the latest dispatching thread.
void charge_worker(ThreadState* w, double seconds) {
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  uint32_t node = 0;
  ThreadState* d = g_dispatcher.load(std::memory_order_acquire);
  const uint32_t epoch = g_epoch.load(std::memory_order_relaxed);
  if (d != nullptr && d != w) {
    int depth = d->depth.load(std::memory_order_acquire);
    if (depth > 0 && depth <= kMaxOpDepth) {
      const OpEntry& e = d->ops[depth - 1];  // the owner may be rewriting it: PolledU32 fields
      if (e.epoch == epoch) node = e.node;
    }
  }
  TreeWriter t(tree());
  uint32_t where;
  if (node != 0) {
    where = t.child(node, t.named_frame(Kind::Thread, "worker"));
  } else {
    where = w->thread_node;
  }
  if (where != 0) t.add(where, m_cpu_time, seconds);
}

// The process's thread count, from one stat (procfs counts a task folder's links as threads + 2).
nlink_t thread_links() {
  struct stat st;
  return stat("/proc/self/task", &st) == 0 ? st.st_nlink : 0;
}

void* run(void*) {
  registry::ignore(registry::gettid_());
  // Polls at the sample interval, at most every 2 ms (each poll is a clock read per worker).
  int64_t interval = static_cast<int64_t>(g_opts.sample_interval * 1e9);
  if (interval < 2000000) interval = 2000000;
  int64_t next_drain = 0, next_scan = 0;
  nlink_t links = 0;
  while (!g_stop.load(std::memory_order_acquire)) {
    timespec ts{static_cast<time_t>(interval / 1000000000LL), static_cast<long>(interval % 1000000000LL)};
    nanosleep(&ts, nullptr);
    if (g_stop.load(std::memory_order_acquire)) break;
    int64_t now = monotonic_ns();
    nlink_t now_links = thread_links();
    if (now >= next_scan || now_links != links) {
      registry::scan_tasks();
      registry::reap();
      next_scan = now + 100000000LL;
      links = now_links;
    }
    registry::poll_workers(charge_worker);
    if (now >= next_drain) {
      registry::drain_all();
      next_drain = now + 20000000LL;
    }
  }
  registry::scan_tasks();
  registry::poll_workers(charge_worker);
  return nullptr;
}

}  // namespace

void start_sampler_thread() {
  if (g_running || !g_opts.sample) return;
  if (!g_atfork) {
    // A forked child has no sampler thread (and records nothing).
    pthread_atfork(nullptr, nullptr, [] { g_running = false; });
    g_atfork = true;
  }
  g_stop.store(false);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);  // inherited by the new thread
  int rc = pthread_create(&g_thread, nullptr, run, nullptr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (rc == 0) {
    pthread_setname_np(g_thread, "deepcontext-smp");
    g_running = true;
  }
}

void stop_sampler_thread() {
  if (!g_running) return;
  g_stop.store(true, std::memory_order_release);
  pthread_join(g_thread, nullptr);
  g_running = false;
}

}  // namespace dc::detail
