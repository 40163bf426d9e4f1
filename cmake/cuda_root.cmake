# CUDA's headers and runtime from a folder that is not a full CUDA toolkit: PyPI's CUDA wheels
# (nvidia-cuda-runtime, nvidia-cuda-crt and nvidia-cuda-cccl all install into
# <site-packages>/nvidia/cu13, with include/, include/cccl/ and lib/). Defines what gpumem uses of
# FindCUDAToolkit: the targets CUDA::cudart_static and CUDA::cudart (when libcudart.so is there)
# and the variables CUDAToolkit_FOUND, CUDAToolkit_VERSION, CUDAToolkit_INCLUDE_DIRS and
# CUDAToolkit_LIBRARY_DIR. Input: GPUMEM_CUDA_ROOT, the folder holding include/ and lib/.
#
# gpumem_find_pypi_cuda(<out> <python>) sets <out> to such a folder of <python>'s environment, or
# to "" when that environment has none.
function(gpumem_find_pypi_cuda out python)
  execute_process(
    COMMAND "${python}" -c [[
import os
try:
    import nvidia
    roots = list(nvidia.__path__)
except ImportError:
    roots = []
for root in roots:
    cu = os.path.join(root, "cu13")
    if (os.path.isfile(os.path.join(cu, "include", "cuda_runtime_api.h"))
            and os.path.isfile(os.path.join(cu, "lib", "libcudart_static.a"))):
        print(cu)
        break
]]
    OUTPUT_VARIABLE folder OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  set(${out} "${folder}" PARENT_SCOPE)
endfunction()

if(NOT GPUMEM_CUDA_ROOT)
  return()
endif()
if(NOT EXISTS "${GPUMEM_CUDA_ROOT}/include/cuda_runtime_api.h"
   OR NOT EXISTS "${GPUMEM_CUDA_ROOT}/lib/libcudart_static.a")
  message(FATAL_ERROR
    "GPUMEM_CUDA_ROOT=${GPUMEM_CUDA_ROOT} does not hold CUDA's runtime: expected "
    "include/cuda_runtime_api.h and lib/libcudart_static.a there (pip install "
    "'nvidia-cuda-runtime==13.*' 'nvidia-cuda-crt==13.*' 'nvidia-cuda-cccl==13.*' puts them in "
    "<site-packages>/nvidia/cu13).")
endif()
find_package(Threads REQUIRED)
file(STRINGS "${GPUMEM_CUDA_ROOT}/include/cuda_runtime_api.h" _gpumem_cudart_version
     REGEX "^#define CUDART_VERSION +[0-9]+")
string(REGEX REPLACE ".* ([0-9]+).*" "\\1" _gpumem_cudart_version "${_gpumem_cudart_version}")
math(EXPR _gpumem_cuda_major "${_gpumem_cudart_version} / 1000")
math(EXPR _gpumem_cuda_minor "(${_gpumem_cudart_version} % 1000) / 10")
set(CUDAToolkit_FOUND TRUE)
set(CUDAToolkit_VERSION "${_gpumem_cuda_major}.${_gpumem_cuda_minor}")
set(CUDAToolkit_VERSION_MAJOR "${_gpumem_cuda_major}")
set(CUDAToolkit_INCLUDE_DIRS "${GPUMEM_CUDA_ROOT}/include")
set(CUDAToolkit_LIBRARY_DIR "${GPUMEM_CUDA_ROOT}/lib")
if(NOT TARGET CUDA::cudart_static)
  add_library(CUDA::cudart_static STATIC IMPORTED)
  set_target_properties(CUDA::cudart_static PROPERTIES
    IMPORTED_LOCATION "${GPUMEM_CUDA_ROOT}/lib/libcudart_static.a"
    INTERFACE_INCLUDE_DIRECTORIES "${GPUMEM_CUDA_ROOT}/include"
    INTERFACE_LINK_LIBRARIES "Threads::Threads;${CMAKE_DL_LIBS};rt")
endif()
if(NOT TARGET CUDA::cudart)
  file(GLOB _gpumem_cudart_so "${GPUMEM_CUDA_ROOT}/lib/libcudart.so*")
  if(_gpumem_cudart_so)
    list(GET _gpumem_cudart_so 0 _gpumem_cudart_so)
    add_library(CUDA::cudart SHARED IMPORTED)
    set_target_properties(CUDA::cudart PROPERTIES
      IMPORTED_LOCATION "${_gpumem_cudart_so}"
      INTERFACE_INCLUDE_DIRECTORIES "${GPUMEM_CUDA_ROOT}/include")
  endif()
endif()
message(STATUS "gpumem: CUDA ${CUDAToolkit_VERSION} headers and runtime from ${GPUMEM_CUDA_ROOT}")
