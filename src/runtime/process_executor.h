#pragma once
// The worker-process executor (ExecutorOptions::backend "mp", vLLM's name): the model runs in a
// child process that owns the device, and the engine talks to it over a Unix socket.
//
// How it works. start_process_executor creates a socket pair and a shared-memory file (memfd,
// sparse: pages exist only once written), then fork()s. The child loads an InProcessExecutor and
// serves requests until the socket closes: each message is a header {type, size} and a payload in
// the codec of runtime/step_codec.h. launch() only sends the plan, so the engine's host work
// overlaps the step as in-process; wait() reads the result message, whose logits and hidden
// states the worker has left in the shared memory (logits at offset 0, hidden states after them).
// An error inside the worker comes back as an error message and fails that step alone; a worker
// that dies closes the socket, and every later call throws.
//
// With --tensor-parallel-size N it forks N workers, rank 0 to N - 1, over one more shared segment
// for their collectives (core/shm_communicator.h); each loads its rank's slices. Every message
// goes to each rank and each replies; rank 0's reply and results are the answer. A rank's error
// or exit stops the whole group: that call and every later one throw a message naming the rank.
//
// The fork happens before the engine starts its threads and before this process touches CUDA
// (the parent never loads the model), so the child starts from a single-threaded copy; it dies
// with the parent (PR_SET_PDEATHSIG).
#include <memory>

#include "runtime/executor.h"

namespace pagoda {

/// Forks the worker, waits until it has loaded the model, and returns the proxy; throws the
/// worker's load error (InvalidArgument, NotFound or Internal, with its message).
[[nodiscard]] std::unique_ptr<Executor> start_process_executor(const ExecutorOptions& options);

}  // namespace pagoda
