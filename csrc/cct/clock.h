// The operator layer's clock: two reads an event (entry and exit), so its cost is per event.
// Where the kernel keeps time with the TSC, the counter is read directly (rdtsc: 9.5 ns on the
// 2-core CPU VM and 24 ns on the H200 VM, against 23.5 and 43-47 ns for the vDSO's
// clock_gettime; h200-2026-12-04-models-f6a0ff1.md) and an op's duration is converted to
// nanoseconds at its exit. Elsewhere, and with DEEPCONTEXT_CLOCK=monotonic, ticks are
// CLOCK_MONOTONIC nanoseconds.
#pragma once
#include <time.h>

#include <atomic>
#include <cstdint>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace dc::detail {

// Set once, by init_clock() before capture is first enabled; read by every event after.
extern std::atomic<bool> g_clock_tsc;
extern std::atomic<double> g_ns_per_tick;

// Chooses the clock and calibrates the TSC against CLOCK_MONOTONIC (about 2 ms, once a
// process). Call before the first event.
void init_clock();

inline int64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

inline int64_t now_ticks() {
#if defined(__x86_64__)
  if (g_clock_tsc.load(std::memory_order_relaxed)) return static_cast<int64_t>(__rdtsc());
#endif
  return monotonic_ns();
}

inline int64_t ticks_to_ns(int64_t ticks) {
  if (!g_clock_tsc.load(std::memory_order_relaxed)) return ticks;
  return static_cast<int64_t>(static_cast<double>(ticks) * g_ns_per_tick.load(std::memory_order_relaxed));
}

}  // namespace dc::detail
