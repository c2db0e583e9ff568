#pragma once
// --speculative-config: vLLM's JSON object (keys of vllm/config/speculative.py) into a
// SpeculativeConfig.
#include <string_view>

#include "pagoda/engine_args.h"

namespace pagoda::cli {

/// Parses and checks the flag's JSON, as vLLM reads it: `method` ngram (also `model` "ngram" or
/// "[ngram]" without a method) with `num_speculative_tokens` (required) and `prompt_lookup_min`
/// / `prompt_lookup_max` (both 5 when neither is given, else the missing one equals the other).
/// `method` draft_model (also a `model` without a method, as vLLM infers it) with `model` (the
/// draft's directory) and `num_speculative_tokens`; so do eagle, eagle3 (EAGLE heads) and
/// pagoda's parallel_draft. vLLM's other methods (medusa, mtp, ...) and keys pagoda does not know
/// are refused by name;
/// vLLM keys without meaning here (draft_tensor_parallel_size 1, disable_log_stats, ...) are
/// accepted. pagoda's own keys: `adaptive` (bool, default true), `draft_row_cost` (number) and
/// `bench_acceptance_rate` (benchmarks: keep each draft with this probability, 0..1).
/// Throws InvalidArgument with a message that names the key.
[[nodiscard]] SpeculativeConfig parse_speculative_config(std::string_view json);

}  // namespace pagoda::cli
