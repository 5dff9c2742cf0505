// Is the libcupti chosen at run time one whose activity records this build can read? The record
// structs (CUpti_ActivityKernel*, ...) come from the CUPTI headers the core was compiled with,
// while libcupti is found at run time (a torch wheel's, a toolkit's). Reading records with the
// wrong layouts gives wrong numbers, not an error. Across CUDA majors CUPTI replaces the structs;
// within one, a release only appends fields, so a library as new as the headers (or newer) is
// read correctly and an older one is not (it does not write the fields the build reads).
// Header-only and free of CUDA headers, so tests compile it without a toolkit.
#pragma once
#include <cstdint>
#include <string>

namespace dc {
namespace gpu {

// The CUDA major release of a CUPTI API version: xxyyzz from CUDA 13 on (130001 = 13.0 Update 1);
// before it, a running number (cupti_version.h: v13-v18 are CUDA 11, v19-v28 CUDA 12).
inline int cupti_cuda_major(uint32_t api) {
  if (api >= 10000) return static_cast<int>(api / 10000);
  if (api >= 19) return 12;
  if (api >= 13) return 11;
  if (api >= 12) return 10;
  return 0;  // older than CUDA 10: never supported
}

// The toolkit release of a CUPTI API version, comparable within one major: CUDA 13 on, xxyy of
// xxyyzz (zz is a CUPTI patch level, same layouts); before, the running number itself.
inline uint32_t cupti_release(uint32_t api) { return api >= 10000 ? api / 100 : api; }

// "" when a library reporting `runtime` (cuptiGetVersion) can be read with the layouts of
// `built` (CUPTI_API_VERSION of the build's headers), else the one-line reason capture is off.
inline std::string cupti_version_mismatch(uint32_t built, uint32_t runtime,
                                          const std::string& library) {
  const int want = cupti_cuda_major(built);
  const int have = cupti_cuda_major(runtime);
  if (want != 0 && want == have && cupti_release(runtime) >= cupti_release(built)) return "";
  return "GPU capture off: " + library + " is CUPTI " + std::to_string(runtime) + " (CUDA " +
         (have ? std::to_string(have) : std::string("?")) + ") but this build reads the records " +
         "of CUPTI " + std::to_string(built) + " (CUDA " + std::to_string(want) +
         "); use a libcupti of CUDA " + std::to_string(want) + " at least that new (set " +
         "DEEPCONTEXT_CUPTI_LIB) or rebuild deepcontext against this CUDA's headers";
}

}  // namespace gpu
}  // namespace dc
