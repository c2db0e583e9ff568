#pragma once
// SamplingParams from a JSON object with vLLM's field names (the fields of an OpenAI request body
// or of a line of `pagoda generate --input`). Type errors name the field.
#include <set>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "sampling/sampling_params.h"

namespace pagoda {

/// The sampling fields this parser reads.
[[nodiscard]] const std::set<std::string>& sampling_json_fields();

/// Reads every sampling field present in `j` onto `params` (absent fields keep their value).
/// Throws InvalidArgument "<where>field 'x' must be ..." for a wrong type; values are range-checked
/// later by SamplingParams::validate.
void read_sampling_params(const nlohmann::json& j, SamplingParams& params,
                          const std::string& where = "");

}  // namespace pagoda
