// A kernel whose time is one known loop (the line marked HOT), for the PC sampling GPU test:
// built at test time with nvcc -lineinfo, run through ctypes.
#include <cuda_runtime.h>

// n is a power of two larger than the L2 cache: the scattered loads make it memory bound.
extern "C" __global__ void hot_loop(float* out, const float* in, int n, int iters) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float acc = 0.0f;
  for (int k = 0; k < iters; ++k) {
    acc += in[(i * 33 + k * 4099) & (n - 1)] * 1.0001f;  // HOT
  }
  out[i] = acc;
}

// Launches the kernel `launches` times and waits; returns the CUDA error code (0: success).
extern "C" int run_hot_loop(int n, int iters, int launches) {
  float *in = nullptr, *out = nullptr;
  if (cudaMalloc(&in, n * sizeof(float)) != cudaSuccess) return 1;
  if (cudaMalloc(&out, n * sizeof(float)) != cudaSuccess) return 2;
  cudaMemset(in, 0, n * sizeof(float));
  for (int l = 0; l < launches; ++l) hot_loop<<<(n + 255) / 256, 256>>>(out, in, n, iters);
  int err = static_cast<int>(cudaDeviceSynchronize());
  cudaFree(in);
  cudaFree(out);
  return err;
}
