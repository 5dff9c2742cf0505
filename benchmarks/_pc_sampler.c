/* A minimal PC sampler for benchmarks/where.py: a high-resolution wall-clock timer delivers a
 * real-time signal to one thread, whose handler stores the interrupted instruction pointer.
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
static uintptr_t g_pcs[MAX_SAMPLES];
static volatile long g_n;
static timer_t g_timer;
static int g_armed;

static void on_signal(int sig, siginfo_t* info, void* uc_v) {
  (void)sig;
  (void)info;
  const ucontext_t* uc = (const ucontext_t*)uc_v;
  long i = g_n;
  if (i >= MAX_SAMPLES) return;
#if defined(__x86_64__)
  g_pcs[i] = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
  g_pcs[i] = (uintptr_t)uc->uc_mcontext.pc;
#else
  g_pcs[i] = 0;
#endif
  g_n = i + 1;
}

/* Samples the calling thread every interval_ns of wall time. 0: started. */
int pcs_start(long interval_ns) {
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
  ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
  if (timer_create(CLOCK_MONOTONIC, &ev, &g_timer) != 0) return -2;
  struct itimerspec its;
  its.it_interval.tv_sec = interval_ns / 1000000000L;
  its.it_interval.tv_nsec = interval_ns % 1000000000L;
  its.it_value = its.it_interval;
  if (timer_settime(g_timer, 0, &its, NULL) != 0) return -3;
  g_armed = 1;
  return 0;
}

/* Stops the timer; returns the samples taken since the last reset. */
long pcs_stop(void) {
  if (g_armed) {
    timer_delete(g_timer);
    g_armed = 0;
  }
  return g_n;
}

const uintptr_t* pcs_data(void) { return g_pcs; }
void pcs_reset(void) { g_n = 0; }
