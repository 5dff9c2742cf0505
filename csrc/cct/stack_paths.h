// A thread's memo of the native stacks its operator events and kernel launches unwind: a launch
// inside an op unwinds about 50 frames, a top-level op 55-110 (H200, GPT-2 training: 1,805
// unwinds a step at 0.97 us each, benchmarks/results/h200-2026-12-04-native-unwinds-0e94675.md),
// and nearly all repeat a stack seen before. A remembered stack keeps each return address with the
// stack slot it was read from, as an offset above the unwinding function's own frame; an event
// whose slots hold the same addresses has that same stack, frame for frame (each frame's return
// address decides where the next one's is read), so it takes the remembered frames after reading
// those words instead of unwinding. The result is what an unwind gives, never a guess: where a
// slot differs, the event unwinds. x86-64 only (a call pushes its return address there).
#pragma once
#include <atomic>
#include <cstdint>

namespace dc::detail {

struct StackPaths {
  static constexpr int kFrames = 128;              // deeper stacks are not remembered
  static constexpr uint32_t kSets = 256, kWays = 4;
  static constexpr uint32_t kPool = 1 << 15;       // frames of all stacks (12 bytes each)
  struct Path {
    uint64_t key = 0;  // stack_path_key; 0: empty
    uint32_t at = 0;   // its first frame in the pool
    uint32_t n = 0;    // its frames
  };
  Path path[kSets * kWays];
  // The stacks' frames, appended; when full, every stack is forgotten and learned again.
  uint32_t used = 0;
  uintptr_t ip[kPool];
  uint32_t slot[kPool];  // where ip[i] was read: an offset above the unwinding function's frame
  // Counts written by the owner only (load, add, store: no locked instruction), read by
  // registry::stack_memo_counts for the profile's metadata.
  std::atomic<uint64_t> recalled{0}, learned{0};
  static void count(std::atomic<uint64_t>& c) {
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
};

// The set a thread's event looks in: what it runs under (its open op's node, or the op's name),
// which caller (unwind_inside's or unwind_whole's events) and how deep the unwind starts. Only
// narrows the search; the slots decide.
uint64_t stack_path_key(uint64_t op, int which, intptr_t depth_bytes);

// Copies into ips the frames of a remembered stack that this one has (same key, every slot
// holding its address), sets *n_read to their count and returns true; else false. `base`: the
// unwinding function's frame address, `stack_hi`: the top of the thread's stack (nothing past it
// is read).
bool recall_stack(StackPaths* p, uint64_t key, uintptr_t base, uintptr_t stack_hi, uintptr_t* ips,
                  int* n_read);

// Remembers an unwound stack (`ips`, n of them) given the same frames with their slots, from
// native::backtrace_slots; a stack that does not match frame for frame is not remembered.
void remember_stack(StackPaths* p, uint64_t key, uintptr_t base, const uintptr_t* ips, int n,
                    const uintptr_t* slot_ips, const uintptr_t* slots, int n_slots);

}  // namespace dc::detail
