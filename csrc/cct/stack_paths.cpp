#include "stack_paths.h"

#include <algorithm>
#include <cstring>

#include "key_mix.h"

namespace dc::detail {
namespace {
StackPaths::Path* set_of(StackPaths* p, uint64_t key) {
  return &p->path[(key % StackPaths::kSets) * StackPaths::kWays];
}

// Whether the stack above `base` holds the remembered frames in their slots. It reads other
// frames' words (sanitizers: not ours to check); none past `stack_hi`.
__attribute__((no_sanitize("address", "undefined"))) bool holds(const StackPaths* p,
                                                               const StackPaths::Path& path,
                                                               uintptr_t base, uintptr_t stack_hi) {
  const uintptr_t* ip = p->ip + path.at;
  const uint32_t* slot = p->slot + path.at;
  if (base + slot[path.n - 1] + sizeof(uintptr_t) > stack_hi) return false;
  for (uint32_t i = 0; i < path.n; ++i)
    if (*reinterpret_cast<const volatile uintptr_t*>(base + slot[i]) != ip[i]) return false;
  return true;
}
}  // namespace

uint64_t stack_path_key(uint64_t op, int which, intptr_t depth_bytes) {
  uint64_t k = key_mix(key_mix(0x243F6A8885A308D3ull, op), static_cast<uint64_t>(depth_bytes) * 4 + which);
  return k ? k : 1;
}

bool recall_stack(StackPaths* p, uint64_t key, uintptr_t base, uintptr_t stack_hi, uintptr_t* ips,
                  int* n_read) {
#if defined(__x86_64__)
  const StackPaths::Path* set = set_of(p, key);
  for (uint32_t w = 0; w < StackPaths::kWays; ++w) {
    const StackPaths::Path& path = set[w];
    if (path.key != key || !holds(p, path, base, stack_hi)) continue;
    std::memcpy(ips, p->ip + path.at, sizeof(uintptr_t) * path.n);
    *n_read = static_cast<int>(path.n);
    StackPaths::count(p->recalled);
    return true;
  }
#endif
  return false;
}

void remember_stack(StackPaths* p, uint64_t key, uintptr_t base, const uintptr_t* ips, int n,
                    const uintptr_t* slot_ips, const uintptr_t* slots, int n_slots) {
  if (n <= 0 || n > StackPaths::kFrames || n_slots < n) return;
  if (!std::equal(ips, ips + n, slot_ips)) return;  // the two unwinders disagree: unwind each time
  for (int i = 0; i < n; ++i) {
    // Slots rise with the frames; one out of order or out of reach is not a call's.
    if (slots[i] <= base || slots[i] - base > UINT32_MAX || (i > 0 && slots[i] <= slots[i - 1]))
      return;
  }
  if (p->used + static_cast<uint32_t>(n) > StackPaths::kPool) {
    for (StackPaths::Path& path : p->path) path.key = 0;
    p->used = 0;
  }
  StackPaths::Path path{key, p->used, static_cast<uint32_t>(n)};
  std::copy(ips, ips + n, p->ip + path.at);
  for (int i = 0; i < n; ++i) p->slot[path.at + i] = static_cast<uint32_t>(slots[i] - base);
  p->used += path.n;
  StackPaths::Path* set = set_of(p, key);
  for (uint32_t w = StackPaths::kWays - 1; w > 0; --w) set[w] = set[w - 1];
  set[0] = path;
  StackPaths::count(p->learned);
}

}  // namespace dc::detail
