// CPU counters per calling context: each sampled thread gets a perf_event_open counter group,
// read at the CPU-time sampler's sample points; the delta since the previous sample is added to
// the sample's context. No per-event log: a sample carries seven numbers.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>

namespace dc {
}

namespace dc::perf {

// Software events first (always offered), then hardware events (where the kernel has a PMU).
enum Event { PageFaults, ContextSwitches, CpuMigrations, Cycles, Instructions, CacheMisses,
             BranchMisses, kEvents };
constexpr int kSoftware = 3;

// Counts of one sample interval, by Event; `any` is false when the thread has no counters.
struct Deltas {
  bool any;
  uint64_t v[kEvents];
};

// One thread's counters; lives in its ThreadState (never freed, recycled with it).
struct ThreadCounters {
  std::atomic<int> state{0};  // 0 closed, 1 open, 2 being read by the signal handler
  pid_t tid = 0;
  int fd[kEvents] = {-1, -1, -1, -1, -1, -1, -1};  // fd[0] / fd[kSoftware] lead their groups
  uint64_t last[kEvents] = {};
  uint64_t hw_enabled = 0, hw_running = 0;  // for scaling multiplexed hardware counts
};

// Turns counters on or off for threads armed from now on. Returns the note for the profile
// ("" when every event is available), e.g. that hardware events are absent.
std::string configure(bool on);
// Opens `c` for thread `tid` (when the sampler arms its timer); a no-op unless configured on.
// Opens the counters of thread `tid` (when configured on): called as its CPU timer is armed; the
// sampler reads them through set_sample_counters (capture.h).
void open_for(pid_t tid);
// Async-signal-safe: the counts since the last read, from the signal handler of c's thread.
void read_deltas(ThreadCounters* c, Deltas* out);
// Adds a sample's counts to `node` as perf.* metrics (caller holds t.mu).
// Closes every thread's counters (end of a session).
void close_all();
// Whether some thread went without counters because of the file-descriptor budget.
bool budget_reached();

}  // namespace dc::perf
