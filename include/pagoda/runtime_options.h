#pragma once
// RuntimeOptions: the runtime's tuning knobs and A/B switches (docs/engine.md, "Tuning knobs").
// The defaults are the measured best; the command line fills them from the PAGODA_* environment
// variables once, at start-up (src/cli/runtime_env.cc), and passes them down: nothing below the
// command line reads the environment.
#include <cstdint>
#include <string>

namespace pagoda {

struct RuntimeOptions {
  // GPU model.
  bool cuda_graphs = true;      // PAGODA_ENFORCE_EAGER=1 (or --enforce-eager) turns them off
  bool cublaslt_tuning = true;  // PAGODA_CUBLASLT_TUNING=0: the heuristic's first algorithm
  // Where the timed cuBLASLt choices persist between start-ups ("": nowhere). The command line's
  // default is $XDG_CACHE_HOME/pagoda/cublaslt-tuning.json (~/.cache/...);
  // PAGODA_CUBLASLT_TUNING_CACHE=FILE moves it, =0 turns it off.
  std::string cublaslt_tuning_cache;
  bool device_sampling = true;  // PAGODA_HOST_SAMPLING=1: every row is sampled on the host
  // PAGODA_UNCHAINED_DRAFTS=1: a GPU drafter's greedy passes each send their drafts to the host
  // before the next pass is built, instead of feeding them on the device (Model::forward_chain).
  bool chained_drafts = true;
  bool gemv_fusion = true;            // PAGODA_DISABLE_GEMV_FUSION=1: no fused small-step GEMVs
  int gemv_mma_max_m = -1;            // PAGODA_GEMV_MMA_MAX_M (0..16); -1: the kernel's default
  int gemv_mma_rows = 2;              // PAGODA_GEMV_MMA_ROWS (1..4)
  int gemv_mma_steps = 2;             // PAGODA_GEMV_MMA_STEPS (1..4)
  int attention_min_split_keys = 64;  // PAGODA_ATTENTION_MIN_SPLIT_KEYS (64..1M)
  // PAGODA_DISABLE_HOPPER_ATTENTION=1: 128-row prefill items on the FlashAttention-2 kernel, not
  // the Hopper (wgmma/TMA) one (A/B; kernels/cuda/attention_hopper.h).
  bool hopper_attention = true;
  bool dependent_launch = false;  // PAGODA_PDL=1: programmatic dependent launches (sm_90)
  // Weight loading (runtime/cuda/weight_streamer.h).
  bool load_pinned = true;   // PAGODA_LOAD_PINNED=0: pageable copies
  int load_buffers = 0;      // PAGODA_LOAD_BUFFERS (1..256); 0: two per loader thread, 4..16
  int load_buffer_mib = 16;  // PAGODA_LOAD_BUFFER_MIB (1..1024)
};

}  // namespace pagoda
