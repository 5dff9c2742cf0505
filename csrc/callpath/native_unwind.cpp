// Native unwinding: libunwind's unw_backtrace when the shared library is present, libgcc's
// _Unwind_Backtrace otherwise.
//
// libunwind is dlopen'ed RTLD_LOCAL instead of linked: no headers are needed to build, and its
// own _Unwind_* (which libunwind-dev's unwind.h and -lunwind would bind) can never replace
// libgcc's for C++ exceptions in this process (stack_splicing.md §3). Only the four entry
// points below are used, declared here with the ABI libunwind has kept since 1.1.
#include <dlfcn.h>
#include <unwind.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "native_stack.h"

namespace dc::native {
namespace {

#if defined(__x86_64__)
#define DC_UNW_ARCH "x86_64"
#elif defined(__aarch64__)
#define DC_UNW_ARCH "aarch64"
#else
#define DC_UNW_ARCH ""
#endif

constexpr int kUnwCachePerThread = 2;  // enum unw_caching_policy_t: NONE, GLOBAL, PER_THREAD
// The raw buffer lives on the caller's stack, which may be a small signal stack: ~2 KB.
constexpr int kMaxRaw = kMaxFrames + 8;

using UnwBacktraceFn = int (*)(void**, int);
using UnwSetCachingFn = int (*)(void*, int);
using UnwFlushFn = void (*)(void*, uintptr_t, uintptr_t);

struct Libunwind {
  UnwBacktraceFn backtrace = nullptr;
  UnwFlushFn flush = nullptr;
  void* local_as = nullptr;  // unw_local_addr_space
};

Libunwind g_unw;
std::atomic<bool> g_ready{false};
std::once_flag g_once;

void* open_libunwind() {
  // An explicit path first: a machine without the package can use a copied libunwind.so.8.
  if (const char* path = std::getenv("DEEPCONTEXT_LIBUNWIND")) {
    if (void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL)) return h;
  }
  const char* names[] = {
#ifdef DC_LIBUNWIND_PATH
      DC_LIBUNWIND_PATH,  // found by CMake at build time
#endif
      "libunwind.so.8", "libunwind.so"};
  for (const char* n : names) {
    if (void* h = dlopen(n, RTLD_NOW | RTLD_LOCAL)) return h;
  }
  return nullptr;
}

void load_libunwind() {
  const char* force = std::getenv("DEEPCONTEXT_UNWINDER");
  if (force != nullptr && std::strcmp(force, "libgcc") == 0) return;
  if (DC_UNW_ARCH[0] == '\0') return;
  void* h = open_libunwind();
  if (h == nullptr) return;
  auto bt = reinterpret_cast<UnwBacktraceFn>(dlsym(h, "unw_backtrace"));
  auto as = reinterpret_cast<void**>(dlsym(h, "_UL" DC_UNW_ARCH "_local_addr_space"));
  auto cache = reinterpret_cast<UnwSetCachingFn>(dlsym(h, "_UL" DC_UNW_ARCH "_set_caching_policy"));
  auto flush = reinterpret_cast<UnwFlushFn>(dlsym(h, "_U" DC_UNW_ARCH "_flush_cache"));
  if (bt == nullptr) return;
  if (as != nullptr && cache != nullptr) cache(*as, kUnwCachePerThread);
  g_unw.backtrace = bt;
  g_unw.flush = flush;
  g_unw.local_as = as != nullptr ? *as : nullptr;
}

struct GccState {
  uintptr_t* out;
  int n, max;
};

_Unwind_Reason_Code gcc_step(struct _Unwind_Context* ctx, void* arg) {
  auto* st = static_cast<GccState*>(arg);
  if (st->n >= st->max) return _URC_END_OF_STACK;
  int before = 0;
  uintptr_t ip = _Unwind_GetIPInfo(ctx, &before);
  if (ip == 0) return _URC_END_OF_STACK;
  // A signal frame's pc is exact; bump it so that every entry reads as a return address.
  st->out[st->n++] = before ? ip + 1 : ip;
  return _URC_NO_REASON;
}

int raw_unwind(bool use_libunwind, uintptr_t* out, int max) {
  if (use_libunwind && g_unw.backtrace != nullptr)
    return g_unw.backtrace(reinterpret_cast<void**>(out), max);
  GccState st{out, 0, max};
  _Unwind_Backtrace(gcc_step, &st);
  return st.n;
}

}  // namespace

void init_symbols_and_ranges();  // native_stack.cpp

void init() {
  std::call_once(g_once, [] {
    load_libunwind();
    init_symbols_and_ranges();
    g_ready.store(true, std::memory_order_release);
  });
}

const char* unwinder_name() {
  init();
  return g_unw.backtrace != nullptr ? "libunwind" : "libgcc";
}

// noinline: our own return address marks where the caller's frames start in the raw trace,
// whatever the unwinder reports for its own frames.
__attribute__((noinline)) int backtrace_with(bool use_libunwind, uintptr_t* ips, int max,
                                             int skip) {
  if (!g_ready.load(std::memory_order_acquire)) init();
  max = std::min(max, kMaxFrames);
  if (max <= 0) return 0;
  uintptr_t raw[kMaxRaw];
  int want = std::min(max + skip + 4, kMaxRaw);
  int n = raw_unwind(use_libunwind, raw, want);
  auto mine = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  int first = 0;
  for (int i = 0; i < std::min(n, 6); ++i) {
    if (raw[i] == mine) {
      first = i;
      break;
    }
  }
  first += skip;
  int count = std::max(0, std::min(n - first, max));
  if (count > 0) std::memcpy(ips, raw + first, sizeof(uintptr_t) * count);
  asm volatile("" ::: "memory");  // keep this frame (no tail call into memcpy's caller)
  return count;
}

__attribute__((noinline)) int backtrace(uintptr_t* ips, int max, int skip) {
  // +1: this wrapper's own frame.
  int n = backtrace_with(true, ips, max, skip + 1);
  asm volatile("" ::: "memory");
  return n;
}

namespace {
struct SlotState {
  uintptr_t* ips;
  uintptr_t* slots;
  int n, max;
};

_Unwind_Reason_Code slot_step(struct _Unwind_Context* ctx, void* arg) {
  auto* st = static_cast<SlotState*>(arg);
  int before = 0;
  uintptr_t ip = _Unwind_GetIPInfo(ctx, &before);
  // A signal frame's pc was not pushed by a call: no slot holds it, so the walk ends there.
  if (ip == 0 || before || st->n >= st->max) return _URC_END_OF_STACK;
  st->ips[st->n] = ip;
  // A call pushes its return address just below the callee's CFA (x86-64's ABI), and a context
  // whose ip is that return address reports the callee's CFA (it was reached by unwinding it).
  st->slots[st->n] = _Unwind_GetCFA(ctx) - sizeof(uintptr_t);
  ++st->n;
  return _URC_NO_REASON;
}
}  // namespace

__attribute__((noinline)) int backtrace_slots(uintptr_t* ips, uintptr_t* slots, int max, int skip) {
#if defined(__x86_64__)
  uintptr_t raw_ips[kMaxRaw], raw_slots[kMaxRaw];
  SlotState st{raw_ips, raw_slots, 0, std::min(max + skip + 4, kMaxRaw)};
  _Unwind_Backtrace(slot_step, &st);
  auto mine = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  int first = -1;
  for (int i = 0; i < std::min(st.n, 6); ++i) {
    if (raw_ips[i] == mine) {
      first = i;
      break;
    }
  }
  if (first < 0) return 0;
  first += skip;
  int count = std::max(0, std::min(st.n - first, max));
  if (count > 0) {
    std::memcpy(ips, raw_ips + first, sizeof(uintptr_t) * count);
    std::memcpy(slots, raw_slots + first, sizeof(uintptr_t) * count);
  }
  asm volatile("" ::: "memory");
  return count;
#else
  return 0;
#endif
}

void flush_caches_of_modules();  // native_symbolize.cpp

void flush_caches() {
  init();
  if (g_unw.flush != nullptr && g_unw.local_as != nullptr) g_unw.flush(g_unw.local_as, 0, 0);
  flush_caches_of_modules();
}

}  // namespace dc::native
