# Build options and the flags every pagoda target shares.
option(PAGODA_CUDA "Build the CUDA backend (src/kernels/cuda, sm_90)" OFF)
option(PAGODA_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
option(PAGODA_BUILD_TESTS "Build the test suite" ON)
option(PAGODA_BUILD_BENCH "Build the benchmarks in bench/" ON)
option(PAGODA_NATIVE "Tune for the build machine (-march=native); off gives a portable x86-64-v3 build" ON)

set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CXX_EXTENSIONS OFF)
set(CMAKE_EXPORT_COMPILE_COMMANDS ON)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type" FORCE)
endif()

# The shared assets (tokenizers, chat templates, configs) live beside the checkout.
set(PAGODA_SHARED_DIR "${CMAKE_SOURCE_DIR}/../shared" CACHE PATH "The read-only shared asset folder")

add_library(pagoda_flags INTERFACE)
target_compile_options(pagoda_flags INTERFACE -Wall -Wextra -Wno-unused-parameter)
if(PAGODA_NATIVE)
  target_compile_options(pagoda_flags INTERFACE -march=native)
else()
  target_compile_options(pagoda_flags INTERFACE -march=x86-64-v3)
endif()
if(PAGODA_SANITIZE)
  target_compile_options(pagoda_flags INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer
                                                -fno-sanitize-recover=undefined)
  target_link_options(pagoda_flags INTERFACE -fsanitize=address,undefined)
endif()

# add_pagoda_library(NAME SOURCES... DEPS ...): one layer's library with the shared flags.
function(add_pagoda_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/include)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE pagoda_flags)
endfunction()
include(${CMAKE_CURRENT_LIST_DIR}/PagodaCuda.cmake)
