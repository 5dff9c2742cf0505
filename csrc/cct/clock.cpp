// See clock.h.
#include "clock.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "capture.h"

namespace dc::detail {

std::atomic<bool> g_clock_tsc{false};
std::atomic<double> g_ns_per_tick{1.0};

namespace {
// The kernel uses the TSC for its own clock only once it has found it constant and in step
// across CPUs (it falls back to another clocksource otherwise), so its choice is the test.
bool kernel_keeps_time_with_tsc() {
  const char* want = std::getenv("DEEPCONTEXT_CLOCK");
  if (want != nullptr && std::strcmp(want, "monotonic") == 0) return false;
  FILE* f = std::fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
  if (f == nullptr) return false;
  char name[32] = {0};
  const bool ok = std::fgets(name, sizeof(name), f) != nullptr && std::strcmp(name, "tsc\n") == 0;
  std::fclose(f);
  return ok;
}

#if defined(__x86_64__)
// A (monotonic ns, TSC) pair read as close together as the machine allows: of a few tries, the
// one whose two clock reads are nearest, with the TSC read between them.
void pair(int64_t* ns, int64_t* ticks) {
  int64_t best = INT64_MAX;
  for (int i = 0; i < 5; ++i) {
    const int64_t a = monotonic_ns();
    const int64_t t = static_cast<int64_t>(__rdtsc());
    const int64_t b = monotonic_ns();
    if (b - a < best) {
      best = b - a;
      *ns = a + (b - a) / 2;
      *ticks = t;
    }
  }
}
#endif
}  // namespace

void init_clock() {
  static bool done = false;  // start() runs on one thread at a time (the binding holds the GIL)
  if (done) return;
  done = true;
#if defined(__x86_64__)
  if (!kernel_keeps_time_with_tsc()) return;
  int64_t ns0, t0, ns1, t1;
  pair(&ns0, &t0);
  // 2 ms: pairs read within ~50 ns of each other give the rate to about 5e-5.
  do pair(&ns1, &t1);
  while (ns1 - ns0 < 2000000);
  if (t1 <= t0) return;
  g_ns_per_tick.store(static_cast<double>(ns1 - ns0) / static_cast<double>(t1 - t0),
                      std::memory_order_relaxed);
  g_clock_tsc.store(true, std::memory_order_release);
#endif
}

}  // namespace dc::detail

namespace dc {
const char* op_clock() { return detail::g_clock_tsc.load(std::memory_order_relaxed) ? "tsc" : "monotonic"; }
}  // namespace dc
