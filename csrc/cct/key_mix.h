// One round of the multiply-xorshift mix the core's hash keys are built from (native_key,
// stack_path_key, Lookup::text_hash): cheap, and every input bit reaches the high bits.
#pragma once
#include <cstdint>

namespace dc::detail {

inline uint64_t key_mix(uint64_t h, uint64_t w) {
  h = (h ^ w) * 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 29);
}

}  // namespace dc::detail
