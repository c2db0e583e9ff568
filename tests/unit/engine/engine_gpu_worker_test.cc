// The worker-process executor on the GPU (label gpu): the engine with
// --distributed-executor-backend mp runs the model in a forked worker that owns the device, and
// gives what the in-process engine gives, under check_logprobs_close (two processes may time and
// choose different cuBLASLt algorithms). Its own binary: the fork must happen before this process
// touches CUDA, so the worker run comes first and nothing here asks for the GPU before it.
#include <gtest/gtest.h>

#include "engine_test_util.h"

namespace pagoda {
namespace {

TEST(EngineGpuWorker, WorkerProcessMatchesInProcess) {
  engine_test::Workload w = engine_test::make_workload(11);
  w.prompts.resize(16);
  w.max_tokens.resize(16);
  std::vector<CompletionOutput> out[2];
  for (const int in_process : {0, 1}) {  // the worker first: this process has no CUDA yet
    EngineArgs args = engine_test::small_engine(2048, true, 64 << 20, "cuda");
    args.distributed_executor_backend = in_process ? "uni" : "mp";
    EngineCore engine(args);
    out[in_process] = engine_test::run_alone(engine, w, 5);
    EXPECT_EQ(engine.stats().kv_cache_usage, 0.0);
  }
  engine_test::expect_workload_close(out[1], out[0], 0.4, "worker vs in-process");
}

}  // namespace
}  // namespace pagoda
