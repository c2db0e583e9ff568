#pragma once
// A reference for the GEMV figures: the simplest kernel that reads a buffer once.
#include <cuda_runtime.h>

#include <cstddef>

/// Streams `bytes` (a multiple of 16, 16-byte aligned) from `p` with 16-byte no-L1 loads, 4 in
/// flight per thread, 8 blocks of 256 threads per SM, on the default stream: what any kernel
/// reading a matrix of that size once can reach, its ramp and tail included.
cudaError_t launch_read_probe(const void* p, size_t bytes, int num_sms);
