// perf_event_open counter groups per thread: one read() per group per sample (PERF_FORMAT_GROUP),
// software and hardware events in separate groups so a missing PMU costs nothing but a note.
#include "perf_counters.h"

#include <errno.h>
#include <linux/perf_event.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <mutex>

#include "../cct/capture.h"

namespace dc::perf {
namespace {

struct EventDef {
  uint32_t type;
  uint64_t config;
  const char* metric;
};
const EventDef kDefs[kEvents] = {
    {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS, "perf.page_faults"},
    {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES, "perf.context_switches"},
    {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS, "perf.cpu_migrations"},
    {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, "perf.cycles"},
    {PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, "perf.instructions"},
    {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES, "perf.cache_misses"},
    {PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES, "perf.branch_misses"},
};

std::atomic<bool> g_on{false};
bool g_sw = false, g_hw = false;              // which groups the probe could open
bool g_sw_kernel = true, g_hw_kernel = true;  // count kernel-side too (where permitted)
uint32_t g_metric[kEvents];
std::atomic<int> g_fd_budget{0};  // counter fds still allowed: a share of the open-file limit
std::atomic<bool> g_budget_hit{false};

std::mutex g_mu;
constexpr int kMaxSets = 8192;
ThreadCounters* g_sets[kMaxSets];  // every set ever opened, for close_all
int g_n_sets = 0;

int open_event(const EventDef& e, pid_t tid, int group, bool kernel, bool scaled) {
  perf_event_attr a;
  std::memset(&a, 0, sizeof(a));
  a.size = sizeof(a);
  a.type = e.type;
  a.config = e.config;
  a.exclude_kernel = kernel ? 0 : 1;
  a.exclude_hv = 1;
  a.read_format = PERF_FORMAT_GROUP |
                  (scaled ? PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING : 0);
  return static_cast<int>(syscall(SYS_perf_event_open, &a, tid, -1, group, PERF_FLAG_FD_CLOEXEC));
}

// Opens events [from, to) as one group on `tid` into fd[]; false (errno set, nothing left
// open) if any of them cannot be.
bool open_group(int* fd, int from, int to, pid_t tid, bool kernel, bool scaled) {
  for (int k = from; k < to; ++k) {
    fd[k] = open_event(kDefs[k], tid, k == from ? -1 : fd[from], kernel, scaled);
    if (fd[k] < 0) {
      int err = errno;
      for (int j = from; j < k; ++j) close(fd[j]), fd[j] = -1;
      errno = err;
      return false;
    }
  }
  return true;
}

// Software group: kernel-side counting if permitted (context switches happen in the kernel),
// else user-side only.
bool open_software(int* fd, pid_t tid) {
  if (g_sw_kernel && open_group(fd, 0, kSoftware, tid, true, false)) return true;
  if (errno != EACCES && errno != EPERM) return false;
  g_sw_kernel = false;
  return open_group(fd, 0, kSoftware, tid, false, false);
}

bool open_hardware(int* fd, pid_t tid) {
  if (g_hw_kernel && open_group(fd, kSoftware, kEvents, tid, true, true)) return true;
  if (errno != EACCES && errno != EPERM) return false;
  g_hw_kernel = false;
  return open_group(fd, kSoftware, kEvents, tid, false, true);
}

// Counter sets by kernel thread id (tid % kSlots, bounded probes): the sampled thread finds its
// own in the SIGPROF handler with one gettid and plain loads. Static storage, never destroyed.
constexpr int kSlots = 4096, kProbes = 16;
ThreadCounters g_slots[kSlots];

ThreadCounters* slot_for(pid_t tid, bool for_open) {
  for (int i = 0; i < kProbes; ++i) {
    ThreadCounters* c = &g_slots[(static_cast<unsigned>(tid) + i) % kSlots];
    if (c->tid == tid) return c;
    if (for_open && c->state.load(std::memory_order_acquire) == 0) return c;
  }
  return nullptr;
}

// The sampler's counter reader (set_sample_counters): async-signal-safe (gettid, read).
int read_current(uint64_t* out, int max) {
  ThreadCounters* c = slot_for(static_cast<pid_t>(syscall(SYS_gettid)), false);
  if (c == nullptr || max < kEvents) return 0;
  Deltas d;
  read_deltas(c, &d);
  if (!d.any) return 0;
  for (int k = 0; k < kEvents; ++k) out[k] = d.v[k];
  return kEvents;
}

void close_fds(ThreadCounters* c) {
  for (int k = 0; k < kEvents; ++k)
    if (c->fd[k] >= 0) close(c->fd[k]), c->fd[k] = -1;
}

}  // namespace

std::string configure(bool on) {
  std::lock_guard<std::mutex> g(g_mu);
  g_on.store(false);
  dc::set_sample_counters(nullptr, nullptr, 0);
  if (!on) return "";
  for (int k = 0; k < kEvents; ++k) g_metric[k] = dc::metric_id(kDefs[k].metric);
  // A program must never run out of file descriptors because of us: a quarter of the limit.
  rlimit lim{};
  int budget = 256;
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
    budget = static_cast<int>(std::min<rlim_t>(lim.rlim_cur / 4, 1024));
  g_fd_budget.store(budget);
  g_budget_hit.store(false);
  // Probe on this thread: which groups open at all.
  int fd[kEvents] = {-1, -1, -1, -1, -1, -1, -1};
  const pid_t me = static_cast<pid_t>(syscall(SYS_gettid));
  g_sw_kernel = g_hw_kernel = true;
  g_sw = open_software(fd, me);
  int sw_err = errno;
  g_hw = open_hardware(fd, me);
  int hw_err = errno;
  for (int k = 0; k < kEvents; ++k)
    if (fd[k] >= 0) close(fd[k]);
  if (!g_sw && !g_hw)
    return std::string("perf counters: none available (perf_event_open: ") + std::strerror(sw_err) +
           "; see /proc/sys/kernel/perf_event_paranoid)";
  g_on.store(true);
  dc::set_sample_counters(read_current, g_metric, kEvents);
  std::string note;
  if (!g_hw)
    note = std::string("perf counters: hardware events unavailable (perf_event_open: ") +
           std::strerror(hw_err) + "); software events only";
  if (g_sw && !g_sw_kernel)
    note += std::string(note.empty() ? "" : "; ") +
            "perf counters: user-side only (perf_event_paranoid), context switches read 0";
  return note;
}

void open_thread_locked(ThreadCounters* c, pid_t tid);

void open_for(pid_t tid) {
  if (!g_on.load(std::memory_order_relaxed) || tid <= 0) return;
  std::lock_guard<std::mutex> g(g_mu);
  ThreadCounters* c = slot_for(tid, true);
  if (c == nullptr) {
    g_budget_hit.store(true);
    return;
  }
  open_thread_locked(c, tid);
}

// A recycled slot (its thread exited) is closed and reopened for `tid` (g_mu held).
void open_thread_locked(ThreadCounters* c, pid_t tid) {
  if (c->state.load() == 1 && c->tid == tid) return;
  // A recycled state: the thread it counted has exited, and its own timer is not armed yet.
  close_fds(c);
  c->state.store(0);
  int need = (g_sw ? kSoftware : 0) + (g_hw ? kEvents - kSoftware : 0);
  if (g_fd_budget.fetch_sub(need) < need) {
    g_fd_budget.fetch_add(need);
    g_budget_hit.store(true);
    return;
  }
  bool ok = (g_sw && open_software(c->fd, tid)) | (g_hw && open_hardware(c->fd, tid));
  if (!ok) {
    g_fd_budget.fetch_add(need);
    return;
  }
  std::memset(c->last, 0, sizeof(c->last));
  c->hw_enabled = c->hw_running = 0;
  c->tid = tid;
  bool known = false;
  for (int i = 0; i < g_n_sets; ++i) known |= g_sets[i] == c;
  if (!known && g_n_sets < kMaxSets) g_sets[g_n_sets++] = c;
  c->state.store(1, std::memory_order_release);
}

void read_deltas(ThreadCounters* c, Deltas* out) {
  out->any = false;
  int open = 1;
  if (!c->state.compare_exchange_strong(open, 2, std::memory_order_acquire)) return;
  uint64_t buf[3 + kEvents];
  if (c->fd[0] >= 0 && read(c->fd[0], buf, sizeof(buf)) >= static_cast<ssize_t>(8 * (1 + kSoftware))) {
    for (int k = 0; k < kSoftware && static_cast<uint64_t>(k) < buf[0]; ++k) {
      out->v[k] = buf[1 + k] - c->last[k];
      c->last[k] = buf[1 + k];
    }
    out->any = true;
  } else {
    for (int k = 0; k < kSoftware; ++k) out->v[k] = 0;
  }
  const int nh = kEvents - kSoftware;
  if (c->fd[kSoftware] >= 0 && read(c->fd[kSoftware], buf, sizeof(buf)) >= static_cast<ssize_t>(8 * (3 + nh))) {
    // Multiplexed counters ran only part of the time: scale this interval's count up.
    uint64_t de = buf[1] - c->hw_enabled, dr = buf[2] - c->hw_running;
    c->hw_enabled = buf[1];
    c->hw_running = buf[2];
    for (int k = 0; k < nh; ++k) {
      uint64_t d = buf[3 + k] - c->last[kSoftware + k];
      c->last[kSoftware + k] = buf[3 + k];
      out->v[kSoftware + k] = (dr > 0 && dr < de) ? static_cast<uint64_t>(d * (double(de) / dr)) : d;
    }
    out->any = true;
  } else {
    for (int k = kSoftware; k < kEvents; ++k) out->v[k] = 0;
  }
  c->state.store(1, std::memory_order_release);
}

void close_all() {
  std::lock_guard<std::mutex> g(g_mu);
  g_on.store(false);
  dc::set_sample_counters(nullptr, nullptr, 0);
  for (int i = 0; i < g_n_sets; ++i) {
    ThreadCounters* c = g_sets[i];
    // Wait out a read in progress (a few microseconds) so its fd is never reused under it.
    for (;;) {
      int open = 1;
      if (c->state.compare_exchange_strong(open, 0)) break;
      if (open == 0) break;
      sched_yield();
    }
    int n = 0;
    for (int k = 0; k < kEvents; ++k) n += c->fd[k] >= 0;
    close_fds(c);
    c->tid = 0;
    g_fd_budget.fetch_add(n);
  }
}

bool budget_reached() { return g_budget_hit.load(); }

}  // namespace dc::perf
