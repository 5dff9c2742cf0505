// Built when no CUPTI headers were found: GPU capture reports why it is off.
#include "gpu.h"

namespace dc {
bool gpu_compiled() { return false; }
std::string gpu_start(const std::vector<std::string>&) {
  return "GPU capture off: this build of deepcontext found no CUPTI headers (install the "
         "nvidia-cuda-cupti wheel or set CUDA_HOME, then reinstall)";
}
void gpu_flush(double) {}
void gpu_stop(double) {}
void gpu_release() {}
GpuStats gpu_stats() { return GpuStats{}; }
}  // namespace dc
