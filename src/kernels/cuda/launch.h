#pragma once
// The process's launch mode of the CUDA kernels.
namespace pagoda::cuda {

/// Launch the kernels as programmatic dependent launches (compute capability >= 9 only; else
/// ignored). A process-wide mode: the GPU model sets it from RuntimeOptions when it is built.
void set_dependent_launch(bool enabled);

}  // namespace pagoda::cuda
