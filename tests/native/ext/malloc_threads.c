/* Test-only: threads created from C (no Python, no operators) that spend their time in
   malloc/free. Profiled with native frames, they are found by the /proc scan and sampled; a
   thread's first unwind allocates libunwind's TLS with malloc, so it must not happen while the
   thread is interrupted inside malloc (tests/native/test_signal_stress.py). */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

static double g_seconds;

static double since(const struct timespec* t0) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) * 1e-9;
}

static void* churn(void* arg) {
  unsigned r = (unsigned)(size_t)arg;
  void* keep[64] = {0};
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (since(&t0) < g_seconds) {
    for (int i = 0; i < 1000; ++i) {
      r = r * 1103515245u + 12345u;
      int k = (int)(r % 64);
      free(keep[k]);
      keep[k] = malloc(16 + r % 65536);
    }
  }
  for (int k = 0; k < 64; ++k) free(keep[k]);
  return NULL;
}

int run_malloc_threads(int n, double seconds) {
  pthread_t th[64];
  if (n > 64) n = 64;
  g_seconds = seconds;
  for (int i = 0; i < n; ++i) pthread_create(&th[i], NULL, churn, (void*)(size_t)(i + 1));
  for (int i = 0; i < n; ++i) pthread_join(th[i], NULL);
  return n;
}
