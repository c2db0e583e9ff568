# The CUDA backend (PAGODA_CUDA=ON): src/kernels/cuda, its tests (label gpu) and benchmark.
#
# Only Hopper (sm_90) machine code is built, to keep compile time down. To add Ampere, configure with
# -DCMAKE_CUDA_ARCHITECTURES="80;90" (the kernels use mma.sync/ldmatrix/cp.async, all sm_80+; on
# sm_80 programmatic dependent launch is a no-op and the sampler runs one block per row, clusters
# being sm_90; bench's gemv_sweep is built for sm_90 only). Compiled for sm_80, never run on one.
# To add the sm_90a features (wgmma, setmaxnreg) later, use "90a". The layer list in the top-level
# CMakeLists.txt picks up ${PAGODA_CUDA_LAYERS}, empty when the backend is off.
set(PAGODA_CUDA_LAYERS "")
if(PAGODA_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  enable_language(CUDA)
  # CMake 3.25 does not know nvcc's C++20 flag (nvcc 13 supports it): teach it, then ask for 20.
  if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_EXTENSIONS OFF)
  find_package(CUDAToolkit REQUIRED)
  set(PAGODA_CUDA_LAYERS kernels/cuda)

  # The flags of every CUDA target (pagoda_flags carries host-only flags such as -march).
  add_library(pagoda_cuda_flags INTERFACE)
  target_compile_options(pagoda_cuda_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall,-Wno-unused-parameter
                               -lineinfo>)
endif()
