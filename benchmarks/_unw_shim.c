/* A stand-in for libunwind for benchmarks/unwind_probe.py: deepcontext loads it as its
 * libunwind (DEEPCONTEXT_LIBUNWIND), and it forwards the entry points the core uses to the real
 * one (UNW_REAL), timing every unw_backtrace. Preloaded too (LD_PRELOAD), it wraps
 * dl_iterate_phdr, which libunwind calls only when a return address is not in its caches (its
 * slow path), so each unwind is split by whether it took that path. It also keeps a set of every
 * return address any unwind returned, to tell a miss of libunwind's caches from an address never
 * seen before. Counters are updated without locks: a diagnostic, not exact under races. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static __thread int t_phdr;  // dl_iterate_phdr calls on this thread
static _Atomic uint64_t c_fast, c_slow, ns_fast, ns_slow, fr_fast, fr_slow, c_phdr, ns_phdr;

static uint64_t now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000ull + t.tv_nsec; }

typedef int (*cb_fn)(struct dl_phdr_info*, size_t, void*);
typedef int (*iter_fn)(cb_fn, void*);
static _Atomic uint64_t c_objs;
// The caller's callback and data travel through `data` (a SIGPROF handler's unwind may call
// this inside another call on the same thread: nothing of the outer call may live in globals).
struct counted { cb_fn cb; void* data; };
static int tramp(struct dl_phdr_info* i, size_t z, void* d) {
  const struct counted* c = d;
  atomic_fetch_add(&c_objs, 1);
  return c->cb(i, z, c->data);
}
int dl_iterate_phdr(cb_fn cb, void* data) {
  static iter_fn real;
  if (!real) real = (iter_fn)dlsym(RTLD_NEXT, "dl_iterate_phdr");
  uint64_t t0 = now();
  struct counted c = {cb, data};
  int r = real(tramp, &c);
  ++t_phdr;
  atomic_fetch_add(&c_phdr, 1);
  atomic_fetch_add(&ns_phdr, now() - t0);
  return r;
}

static int (*r_bt)(void**, int);
static int (*r_cache)(void*, int);
static void (*r_flush)(void*, uintptr_t, uintptr_t);
void* _ULx86_64_local_addr_space;

__attribute__((constructor)) static void init(void) {
  const char* p = getenv("UNW_REAL");
  if (!p) return;
  void* h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "[unw] cannot open %s\n", p); return; }
  r_bt = dlsym(h, "unw_backtrace");
  r_cache = dlsym(h, "_ULx86_64_set_caching_policy");
  r_flush = dlsym(h, "_Ux86_64_flush_cache");
  void** as = dlsym(h, "_ULx86_64_local_addr_space");
  if (as) _ULx86_64_local_addr_space = *as;
}

int _ULx86_64_set_caching_policy(void* as, int p) { return r_cache ? r_cache(as, p) : -1; }
void _Ux86_64_flush_cache(void* as, uintptr_t a, uintptr_t b) { if (r_flush) r_flush(as, a, b); }

#define SEEN (1 << 18)
static uintptr_t seen[SEEN];
static _Atomic uint64_t new_slow, new_fast, phdr_in_slow;
// New addresses by frame index, innermost first: 0-2, 3, 4-9, 10+ (a CPU sample's unwind starts
// in the sampler's own three frames, so its index 3 is the interrupted instruction).
static _Atomic uint64_t new_at[4];
static int novel(uintptr_t ip) {  // 1 the first time ip is seen (racy; diagnostic)
  uint64_t h = (ip * 0x9E3779B97F4A7C15ull) >> 46;
  for (;; h = (h + 1) & (SEEN - 1)) {
    if (seen[h] == ip) return 0;
    if (seen[h] == 0) { seen[h] = ip; return 1; }
  }
}
int unw_backtrace(void** buf, int n) {
  int before = t_phdr;
  uint64_t t0 = now();
  int r = r_bt(buf, n);
  uint64_t dt = now() - t0;
  int fresh = 0;
  for (int i = 0; i < r; ++i)
    if (novel((uintptr_t)buf[i])) {
      ++fresh;
      new_at[i < 3 ? 0 : i == 3 ? 1 : i < 10 ? 2 : 3]++;
    }
  if (t_phdr != before) { c_slow++; ns_slow += dt; fr_slow += r; new_slow += fresh; phdr_in_slow += t_phdr - before; }
  else { c_fast++; ns_fast += dt; fr_fast += r; new_fast += fresh; }
  return r;
}

void unw_shim_reset(void) { c_fast = c_slow = ns_fast = ns_slow = fr_fast = fr_slow = c_phdr = ns_phdr = c_objs = new_slow = new_fast = phdr_in_slow = 0;
  for (int i = 0; i < 4; ++i) new_at[i] = 0;
}
void unw_shim_report(const char* tag) {
  fprintf(stderr, "[unw] %s: fast %llu calls %.3f ms (%.2f us, %.1f frames each) | with dl_iterate_phdr %llu calls %.3f ms (%.2f us, %.1f frames) | dl_iterate_phdr %llu calls %.3f ms, %llu objects visited\n",
          tag, (unsigned long long)c_fast, ns_fast / 1e6, c_fast ? ns_fast / 1e3 / c_fast : 0, c_fast ? (double)fr_fast / c_fast : 0,
          (unsigned long long)c_slow, ns_slow / 1e6, c_slow ? ns_slow / 1e3 / c_slow : 0, c_slow ? (double)fr_slow / c_slow : 0,
          (unsigned long long)c_phdr, ns_phdr / 1e6, (unsigned long long)c_objs);
  fprintf(stderr, "[unw] new ips: slow calls %.1f each (%.1f dl_iterate_phdr each), fast calls %.1f each; by frame index (innermost 0): 0-2: %llu, 3: %llu, 4-9: %llu, 10+: %llu\n",
          c_slow ? (double)new_slow / c_slow : 0, c_slow ? (double)phdr_in_slow / c_slow : 0, c_fast ? (double)new_fast / c_fast : 0, (unsigned long long)new_at[0],
          (unsigned long long)new_at[1], (unsigned long long)new_at[2], (unsigned long long)new_at[3]);
}
