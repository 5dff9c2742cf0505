// Live allocations by address: open addressing with linear probing and backward-shift deletion
// (no tombstones, so a long run of allocate/free never degrades it). 24 bytes a slot, grown x2
// when 3/4 full, so it is at least 3/8 full after any growth: at most 64 bytes per allocation
// live at the high-water mark. Not thread-safe (the memory layer's lock guards it).
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace dc::memory {

struct LiveEntry {
  uintptr_t ptr;   // 0: empty slot
  uint64_t bytes;
  uint32_t node;   // allocating context
  uint32_t slot;   // device slot
};
static_assert(sizeof(LiveEntry) == 24, "the per-allocation cost is documented in docs/memory.md");

class LiveTable {
 public:
  ~LiveTable() = delete;  // lives as long as the process (allocator callbacks may come at exit)
  LiveTable() { rebuild(kInitial); }

  uint64_t size() const { return count_; }
  uint64_t capacity() const { return mask_ + 1; }
  uint64_t high_water() const { return high_; }

  // Inserts or replaces; a replaced entry (its free was never reported) is returned in *old.
  bool put(const LiveEntry& e, LiveEntry* old) {
    if ((count_ + 1) * 4 > capacity() * 3) rebuild(capacity() * 2);
    uint64_t i = home(e.ptr);
    while (slots_[i].ptr != 0) {
      if (slots_[i].ptr == e.ptr) {
        *old = slots_[i];
        slots_[i] = e;
        return true;
      }
      i = (i + 1) & mask_;
    }
    slots_[i] = e;
    if (++count_ > high_) high_ = count_;
    return false;
  }

  // Removes `ptr`; false when it is not live.
  bool take(uintptr_t ptr, LiveEntry* out) {
    uint64_t i = home(ptr);
    while (slots_[i].ptr != ptr) {
      if (slots_[i].ptr == 0) return false;
      i = (i + 1) & mask_;
    }
    *out = slots_[i];
    // Backward shift: pull later entries of the probe run into the hole.
    uint64_t hole = i;
    for (uint64_t j = (i + 1) & mask_; slots_[j].ptr != 0; j = (j + 1) & mask_) {
      uint64_t h = home(slots_[j].ptr);
      // j's entry may move to the hole if its home is not cyclically in (hole, j].
      if (((j - h) & mask_) >= ((j - hole) & mask_)) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole].ptr = 0;
    --count_;
    return true;
  }

  void clear() {
    std::memset(slots_, 0, sizeof(LiveEntry) * capacity());
    count_ = 0;
    high_ = 0;
  }

  template <typename F>
  void for_each(F f) const {
    for (uint64_t i = 0; i <= mask_; ++i)
      if (slots_[i].ptr != 0) f(slots_[i]);
  }

 private:
  static constexpr uint64_t kInitial = 1 << 12;

  uint64_t home(uintptr_t p) const {
    // Allocations are at least 16-byte aligned; Fibonacci hashing spreads the rest.
    return (static_cast<uint64_t>(p) >> 4) * 0x9E3779B97F4A7C15ULL >> shift_;
  }

  void rebuild(uint64_t cap) {
    LiveEntry* old = slots_;
    uint64_t old_cap = old ? capacity() : 0;
    slots_ = static_cast<LiveEntry*>(std::calloc(cap, sizeof(LiveEntry)));
    mask_ = cap - 1;
    shift_ = 64;
    for (uint64_t c = cap; c > 1; c >>= 1) --shift_;
    count_ = 0;
    for (uint64_t i = 0; i < old_cap; ++i) {
      if (old[i].ptr == 0) continue;
      uint64_t j = home(old[i].ptr);
      while (slots_[j].ptr != 0) j = (j + 1) & mask_;
      slots_[j] = old[i];
      ++count_;
    }
    std::free(old);
  }

  LiveEntry* slots_ = nullptr;
  uint64_t mask_ = 0;
  int shift_ = 64;
  uint64_t count_ = 0;
  uint64_t high_ = 0;
};

}  // namespace dc::memory
