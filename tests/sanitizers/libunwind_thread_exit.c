// The ThreadSanitizer limitation behind the native-sampling tests left out of the TSan run
// (tests/sanitizers/KNOWN.md, T2/T5), shown without DeepContext: a thread calls libunwind's
// unw_backtrace once and exits. Under TSan it dies by SIGSEGV at its exit.
//
// libunwind keeps a per-thread trace cache behind a pthread key whose destructor puts itself
// back until the last of glibc's PTHREAD_DESTRUCTOR_ITERATIONS (4) rounds, then frees the cache
// with mempool_free, which takes a pthread mutex. TSan finishes a thread in that same last round,
// from its own key's destructor, created earlier, so it runs first; libunwind's
// pthread_mutex_lock then enters TSan's interceptor with the thread's state already gone
// (__tsan::MutexPreLock). Reported upstream as google/sanitizers#943 (open since 2018).
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

typedef int (*backtrace_fn)(void**, int);
static backtrace_fn unw_backtrace_;

static void* unwind_once(void* arg) {
  void* ips[32];
  (void)arg;
  return (void*)(long)unw_backtrace_(ips, 32);
}

int main(void) {
  void* lib = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL || (unw_backtrace_ = (backtrace_fn)dlsym(lib, "unw_backtrace")) == NULL) {
    puts("no libunwind");
    return 2;
  }
  pthread_t t;
  void* frames;
  pthread_create(&t, NULL, unwind_once, NULL);
  pthread_join(t, &frames);
  printf("thread exited after unwinding %ld frames\n", (long)frames);
  return 0;
}
