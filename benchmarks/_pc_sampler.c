/* A minimal PC sampler for benchmarks/where.py: a high-resolution wall-clock timer delivers a
 * real-time signal to one thread (and optionally a second), whose handler stores the interrupted
 * instruction pointer.
 * (CPU-time timers fire only at the scheduler's tick, 4 ms on some kernels, and then at the same
 * moment as deepcontext's own sampler, whose handler they would appear to be.) No stacks, no
 * symbols: where.py maps each address to its library and symbol afterwards. Its own signal
 * (SIGRTMIN+3), never SIGPROF, so deepcontext's sampler runs beside it undisturbed. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#define MAX_SAMPLES (1 << 22)
#define SLOTS 2 /* 0: the thread that starts sampling; 1: one other thread (where.py --thread) */
static uintptr_t g_pcs[SLOTS][MAX_SAMPLES];
static volatile long g_n[SLOTS];
static timer_t g_timer[SLOTS];
static int g_armed[SLOTS];

/* The slot comes with the signal (the timer's sigev_value), so one handler serves both threads. */
static void on_signal(int sig, siginfo_t* info, void* uc_v) {
  (void)sig;
  const int slot = info->si_value.sival_int;
  if (slot < 0 || slot >= SLOTS) return;
  const ucontext_t* uc = (const ucontext_t*)uc_v;
  long i = g_n[slot];
  if (i >= MAX_SAMPLES) return;
#if defined(__x86_64__)
  g_pcs[slot][i] = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
  g_pcs[slot][i] = (uintptr_t)uc->uc_mcontext.pc;
#else
  g_pcs[slot][i] = 0;
#endif
  g_n[slot] = i + 1;
}

/* Samples thread `tid` into `slot` every interval_ns of wall time. 0: started. */
int pcs_start_thread(int slot, long tid, long interval_ns) {
  if (slot < 0 || slot >= SLOTS) return -4;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGRTMIN + 3, &sa, NULL) != 0) return -1;
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_THREAD_ID;
  ev.sigev_signo = SIGRTMIN + 3;
  ev.sigev_value.sival_int = slot;
  ev._sigev_un._tid = (pid_t)tid;
  if (timer_create(CLOCK_MONOTONIC, &ev, &g_timer[slot]) != 0) return -2;
  struct itimerspec its;
  its.it_interval.tv_sec = interval_ns / 1000000000L;
  its.it_interval.tv_nsec = interval_ns % 1000000000L;
  its.it_value = its.it_interval;
  if (timer_settime(g_timer[slot], 0, &its, NULL) != 0) {
    timer_delete(g_timer[slot]);
    return -3;
  }
  g_armed[slot] = 1;
  return 0;
}

/* Samples the calling thread (slot 0). */
int pcs_start(long interval_ns) {
  return pcs_start_thread(0, (long)syscall(SYS_gettid), interval_ns);
}

/* Stops every timer; returns slot 0's samples since the last reset. */
long pcs_stop(void) {
  for (int s = 0; s < SLOTS; ++s) {
    if (g_armed[s]) {
      timer_delete(g_timer[s]);
      g_armed[s] = 0;
    }
  }
  return g_n[0];
}

long pcs_count(int slot) { return slot >= 0 && slot < SLOTS ? g_n[slot] : 0; }
const uintptr_t* pcs_data_of(int slot) { return g_pcs[slot >= 0 && slot < SLOTS ? slot : 0]; }
const uintptr_t* pcs_data(void) { return g_pcs[0]; }
void pcs_reset(void) {
  for (int s = 0; s < SLOTS; ++s) g_n[s] = 0;
}
