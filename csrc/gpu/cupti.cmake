# GPU capture is compiled only where CUPTI's headers are found (CUDA toolkit, CUDA_HOME, or the
# nvidia-cuda-cupti wheel); libcupti itself is loaded at run time. Otherwise a stub says why.
set(DC_GPU_SOURCES csrc/gpu/gpu_stub.cpp)
set(DC_GPU_INCLUDES "")
set(DC_GPU_DEFINITIONS "")
set(DC_GPU_LIBS "")
