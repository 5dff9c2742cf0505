// A thread's memo of tree lookups, (parent node, key) -> child node, so the common operator
// event finds its node without the tree lock. Nodes are never removed, so a hit is exact. Open
// addressing, doubled when half full, never shrunk; owner-only (it allocates: never touched by
// the signal handler).
#pragma once
#include <cstddef>
#include <cstdint>

namespace dc {

class ChildCache {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  // The node memoized for (parent, key), or kNone.
  uint32_t find(uint32_t parent, uint64_t key) const {
    if (slots_ == nullptr) return kNone;
    for (size_t i = slot_of(parent, key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.node == kNone) return kNone;
      if (s.key == key && s.parent == parent) return s.node;
    }
  }

  void put(uint32_t parent, uint64_t key, uint32_t node) {
    if (node == kNone) return;
    if (2 * (used_ + 1) > mask_ + 1) grow();
    for (size_t i = slot_of(parent, key);; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.node == kNone) {
        s = Slot{key, parent, node};
        ++used_;
        return;
      }
      if (s.key == key && s.parent == parent) {
        s.node = node;
        return;
      }
    }
  }

 private:
  struct Slot {
    uint64_t key;
    uint32_t parent;
    uint32_t node;  // kNone: empty
  };

  size_t slot_of(uint32_t parent, uint64_t key) const {
    uint64_t h = (key ^ (static_cast<uint64_t>(parent) * 0xC2B2AE3D27D4EB4Full)) *
                 0x9E3779B97F4A7C15ull;
    return static_cast<size_t>(h ^ (h >> 31)) & mask_;
  }

  void grow() {
    Slot* old = slots_;
    const size_t old_cap = old ? mask_ + 1 : 0;
    const size_t cap = old_cap ? 2 * old_cap : 1024;
    slots_ = new Slot[cap];
    for (size_t i = 0; i < cap; ++i) slots_[i].node = kNone;
    mask_ = cap - 1;
    used_ = 0;
    for (size_t i = 0; i < old_cap; ++i)
      if (old[i].node != kNone) put(old[i].parent, old[i].key, old[i].node);
    delete[] old;
  }

  Slot* slots_ = nullptr;
  size_t mask_ = 0;
  size_t used_ = 0;
};

}  // namespace dc
