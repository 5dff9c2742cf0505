# GPU capture is compiled only where CUPTI's headers (and cuda.h, which they include) are found:
# -DDEEPCONTEXT_CUPTI_INCLUDE=..., CUDA_HOME / CUDA_PATH, /usr/local/cuda*, or the
# nvidia-cuda-cupti / nvidia-cuda-runtime wheels in the building Python's site-packages.
# Only headers are used: libcupti is dlopen()ed at run time, so the module never links CUDA.
# Without headers (or with -DDEEPCONTEXT_GPU=OFF) a stub says why GPU capture is off.
option(DEEPCONTEXT_GPU "Compile CUPTI-based GPU capture when CUPTI headers are found" ON)

set(DC_GPU_SOURCES csrc/gpu/gpu_stub.cpp csrc/gpu/pc_sampling.cpp)
set(DC_GPU_INCLUDES "")
set(DC_GPU_DEFINITIONS "")
set(DC_GPU_LIBS "")

function(_dc_find_cuda_headers out_cupti out_cuda)
  set(candidates "")
  if(DEEPCONTEXT_CUPTI_INCLUDE)
    list(APPEND candidates "${DEEPCONTEXT_CUPTI_INCLUDE}")
  endif()
  foreach(var CUDA_HOME CUDA_PATH CUDA_ROOT)
    if(DEFINED ENV{${var}})
      list(APPEND candidates "$ENV{${var}}/include" "$ENV{${var}}/extras/CUPTI/include")
    endif()
  endforeach()
  file(GLOB cuda_dirs LIST_DIRECTORIES true /usr/local/cuda /usr/local/cuda-*)
  list(SORT cuda_dirs ORDER DESCENDING)  # newest toolkit first
  foreach(d ${cuda_dirs})
    list(APPEND candidates "${d}/include" "${d}/extras/CUPTI/include"
         "${d}/targets/x86_64-linux/include" "${d}/targets/sbsa-linux/include")
  endforeach()
  # The wheels: site-packages/nvidia/<pkg>/include (cu12: cuda_cupti, cuda_runtime; cu13: cu13).
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -c
      "import glob, os, site, sys\npaths = list(dict.fromkeys(site.getsitepackages() + [site.getusersitepackages()] + sys.path))\nout = []\nfor p in paths:\n    out += sorted(glob.glob(os.path.join(p, 'nvidia', '*', 'include')), reverse=True)\nprint(';'.join(out))"
    OUTPUT_VARIABLE wheel_dirs OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  list(APPEND candidates ${wheel_dirs})
  set(cupti "")
  set(cuda "")
  foreach(d ${candidates})
    if(NOT cupti AND EXISTS "${d}/cupti_activity.h" AND EXISTS "${d}/cupti_callbacks.h")
      set(cupti "${d}")
    endif()
    if(NOT cuda AND EXISTS "${d}/cuda.h")
      set(cuda "${d}")
    endif()
  endforeach()
  set(${out_cupti} "${cupti}" PARENT_SCOPE)
  set(${out_cuda} "${cuda}" PARENT_SCOPE)
endfunction()

if(DEEPCONTEXT_GPU)
  _dc_find_cuda_headers(DC_CUPTI_INCLUDE DC_CUDA_INCLUDE)
  if(DC_CUPTI_INCLUDE AND DC_CUDA_INCLUDE)
    message(STATUS "deepcontext: GPU capture with CUPTI headers from ${DC_CUPTI_INCLUDE} "
                   "(cuda.h from ${DC_CUDA_INCLUDE}); libcupti is loaded at run time")
    set(DC_GPU_SOURCES
      csrc/gpu/cupti_loader.cpp
      csrc/gpu/callbacks.cpp
      csrc/gpu/activity.cpp
      csrc/gpu/gpu.cpp
      csrc/gpu/pc_sampling.cpp)
    set(DC_GPU_INCLUDES "${DC_CUPTI_INCLUDE}" "${DC_CUDA_INCLUDE}")
    set(DC_GPU_DEFINITIONS DC_HAVE_CUPTI=1)
  else()
    message(STATUS "deepcontext: no CUPTI headers found (cupti='${DC_CUPTI_INCLUDE}', "
                   "cuda.h='${DC_CUDA_INCLUDE}'); GPU capture is compiled as a stub")
  endif()
else()
  message(STATUS "deepcontext: GPU capture disabled (-DDEEPCONTEXT_GPU=OFF)")
endif()
