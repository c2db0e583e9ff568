#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "model/config_reader.h"

namespace pagoda {
namespace {

using nlohmann::json;

/// The unscaled inverse frequency of pair i, as transformers computes it in float32:
/// 1 / base^(float(2i) / dim).
float plain_inv_freq(float base, int i, int head_dim) {
  const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
  return 1.0f / std::pow(base, exponent);
}

std::vector<float> scaled_inv_freq(const RopeConfig& rope, int head_dim) {
  // Mirrors transformers' float32 tensor arithmetic step by step, so that angles at long positions
  // agree to the last bit as far as powf allows.
  const int half = head_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  const float base = static_cast<float>(rope.theta);
  const float factor = static_cast<float>(rope.factor);
  for (int i = 0; i < half; ++i) {
    float f = plain_inv_freq(base, i, head_dim);
    if (rope.scaling == RopeScalingType::kLinear) {
      f = f / factor;
    } else if (rope.scaling == RopeScalingType::kLlama3) {
      // Llama 3.1: keep high frequencies, divide low ones by factor, blend in between.
      const float old_len = static_cast<float>(rope.original_max_position_embeddings);
      const float low = static_cast<float>(rope.low_freq_factor);
      const float high = static_cast<float>(rope.high_freq_factor);
      const double low_freq_wavelen =
          static_cast<double>(rope.original_max_position_embeddings) / rope.low_freq_factor;
      const double high_freq_wavelen =
          static_cast<double>(rope.original_max_position_embeddings) / rope.high_freq_factor;
      const float wavelen = static_cast<float>(2 * std::numbers::pi) / f;
      if (wavelen > low_freq_wavelen) {
        f = f / factor;
      } else if (!(wavelen < high_freq_wavelen)) {
        const float smooth = (old_len / wavelen - low) / (high - low);
        f = (1 - smooth) * f / factor + smooth * f;
      }
    }
    inv_freq[static_cast<size_t>(i)] = f;
  }
  return inv_freq;
}

// Dynamic NTK (/u/bloc97, /u/emozilla): for a context of L > max_position_embeddings tokens the
// base grows to base * (factor * L / max_pos - (factor - 1))^(dim / (dim - 2)), which stretches the
// lowest frequencies by about L / max_pos and keeps the highest. L is max_model_len (see rope.h).
RopeTables dynamic_tables(const RopeConfig& rope, int head_dim, int64_t max_model_len) {
  double base = rope.theta;
  if (max_model_len > rope.max_position_embeddings) {
    const double ratio =
        static_cast<double>(max_model_len) / static_cast<double>(rope.max_position_embeddings);
    base *= std::pow(rope.factor * ratio - (rope.factor - 1.0),
                     static_cast<double>(head_dim) / static_cast<double>(head_dim - 2));
  }
  RopeTables t;
  for (int i = 0; i < head_dim / 2; ++i)
    t.inv_freq.push_back(plain_inv_freq(static_cast<float>(base), i, head_dim));
  return t;
}

// YaRN (arXiv 2309.00071): pairs that turn fewer than beta_slow times over the original context
// are interpolated (divided by factor), pairs that turn more than beta_fast times keep their
// frequency, and a linear ramp over the pair index blends between the two; cos and sin are
// multiplied by the attention factor ("mscale", 0.1 ln(factor) + 1 unless the config gives it).
RopeTables yarn_tables(const RopeConfig& rope, int head_dim) {
  const int half = head_dim / 2;
  const double dim = head_dim;
  const auto correction_dim = [&](double rotations) {
    return dim *
           std::log(static_cast<double>(rope.original_max_position_embeddings) /
                    (rotations * 2 * std::numbers::pi)) /
           (2 * std::log(rope.theta));
  };
  double low = correction_dim(rope.beta_fast), high = correction_dim(rope.beta_slow);
  if (rope.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;  // a ramp of width zero
  const float base = static_cast<float>(rope.theta), factor = static_cast<float>(rope.factor);
  RopeTables t;
  for (int i = 0; i < half; ++i) {
    const float pos_freq = std::pow(base, static_cast<float>(2 * i) / static_cast<float>(head_dim));
    const float extrapolation = 1.0f / pos_freq, interpolation = 1.0f / (factor * pos_freq);
    const float ramp = std::clamp(
        (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low), 0.0f,
        1.0f);
    const float keep = 1.0f - ramp;  // the share of the unscaled frequency
    t.inv_freq.push_back(interpolation * (1.0f - keep) + extrapolation * keep);
  }
  const auto mscale = [&](double m) {
    return rope.factor <= 1.0 ? 1.0 : 0.1 * m * std::log(rope.factor) + 1.0;
  };
  double af = mscale(1.0);
  if (rope.attention_factor) {
    af = *rope.attention_factor;
  } else if (rope.mscale != 0.0 && rope.mscale_all_dim != 0.0) {
    af = mscale(rope.mscale) / mscale(rope.mscale_all_dim);
  }
  t.attention_factor = static_cast<float>(af);
  return t;
}

// LongRoPE (Phi-3's "longrope", formerly "su"): each pair's frequency is divided by its own
// searched factor, from long_factor for contexts beyond original_max_position_embeddings and from
// short_factor otherwise; cos and sin are multiplied by sqrt(1 + ln(s) / ln(original)), s the
// extension ratio (factor, or max_position_embeddings / original), unless the config gives it.
RopeTables longrope_tables(const RopeConfig& rope, int head_dim, int64_t max_model_len) {
  const bool long_context = max_model_len > rope.original_max_position_embeddings;
  const std::vector<double>& ext = long_context ? rope.long_factor : rope.short_factor;
  PAGODA_CHECK(ext.size() == static_cast<size_t>(head_dim / 2), "longrope factors: {} for {} pairs",
               ext.size(), head_dim / 2);
  const float base = static_cast<float>(rope.theta);
  RopeTables t;
  for (int i = 0; i < head_dim / 2; ++i) {
    const float shape = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    t.inv_freq.push_back(1.0f /
                         (static_cast<float>(ext[static_cast<size_t>(i)]) * std::pow(base, shape)));
  }
  double af = 1.0;
  if (rope.attention_factor) {
    af = *rope.attention_factor;
  } else if (rope.factor > 1.0) {
    af = std::sqrt(1.0 + std::log(rope.factor) /
                             std::log(static_cast<double>(rope.original_max_position_embeddings)));
  }
  t.attention_factor = static_cast<float>(af);
  return t;
}

/// A list of numbers, or InvalidArgument naming `field`.
std::vector<double> number_list(const json& scaling, const char* key, const ConfigReader& top,
                                const std::string& field, size_t size) {
  std::vector<double> out;
  const json& v = scaling.at(key);
  if (!v.is_array()) top.fail(field, "must be a list of numbers");
  for (const json& x : v) {
    if (!x.is_number() || !(x.get<double>() > 0)) top.fail(field, "must hold numbers > 0");
    out.push_back(x.get<double>());
  }
  if (out.size() != size)
    top.fail(field, fmt::format("must hold head_dim / 2 = {} numbers, holds {}", size, out.size()));
  return out;
}

}  // namespace

RopeConfig parse_rope_config(const json& j, const std::string& source, int head_dim,
                             int64_t max_position_embeddings) {
  RopeConfig rope;
  rope.max_position_embeddings = max_position_embeddings;
  ConfigReader top(j, source);
  // transformers v5 nests everything under rope_parameters; v4 has rope_theta and rope_scaling.
  const bool v5 = top.has("rope_parameters");
  const json empty = json::object();
  const json& scaling_json =
      v5 ? j.at("rope_parameters") : (top.has("rope_scaling") ? j.at("rope_scaling") : empty);
  const std::string scaling_field = v5 ? "rope_parameters" : "rope_scaling";
  if (!scaling_json.is_object()) top.fail(scaling_field, "must be an object");
  if (scaling_json.contains("full_attention") || scaling_json.contains("sliding_attention"))
    top.fail(scaling_field, "per layer type (full_attention, sliding_attention) is not supported");
  ConfigReader scaling(scaling_json, source);
  const auto field = [&](const char* key) { return scaling_field + "." + key; };
  rope.theta =
      v5 ? scaling.optional_number("rope_theta", top.optional_number("rope_theta", 10000.0))
         : top.optional_number("rope_theta", 10000.0);
  if (!(rope.theta > 0)) top.fail(v5 ? field("rope_theta") : "rope_theta", "must be > 0");
  // Partial rotary embeddings (Phi-4-mini, some GPT-NeoX) rotate only the first dims of a head;
  // the RoPE kernels rotate all of them.
  for (const auto& [reader, name] : {std::pair{&top, std::string("partial_rotary_factor")},
                                     std::pair{&scaling, field("partial_rotary_factor")}}) {
    if (reader->optional_number("partial_rotary_factor", 1.0) != 1.0)
      top.fail(name, "other than 1.0 (a partial rotary embedding) is not supported");
  }

  const std::string type =
      scaling.optional_string("rope_type", scaling.optional_string("type", "default"));
  if (type == "default" || type.empty()) return rope;
  rope.factor = scaling.optional_number("factor", 1.0);
  if (!(rope.factor >= 1.0)) top.fail(field("factor"), "must be >= 1");
  if (scaling.has("attention_factor")) {
    rope.attention_factor = scaling.optional_number("attention_factor", 1.0);
    if (!(*rope.attention_factor > 0)) top.fail(field("attention_factor"), "must be > 0");
  }
  // The pre-extension length. Phi-3 keeps it at the top level, and transformers v5 gives that
  // one priority over the scaling object's (standardize_rope_params).
  const auto original = [&](bool required) -> int64_t {
    if (top.has("original_max_position_embeddings"))
      return top.required_int("original_max_position_embeddings");
    if (scaling.has("original_max_position_embeddings"))
      return scaling.required_int("original_max_position_embeddings");
    if (required) top.fail(field("original_max_position_embeddings"), "is missing");
    return max_position_embeddings;
  };
  if (type == "linear") {
    rope.scaling = RopeScalingType::kLinear;
  } else if (type == "llama3") {
    rope.scaling = RopeScalingType::kLlama3;
    rope.low_freq_factor = scaling.optional_number("low_freq_factor", 1.0);
    rope.high_freq_factor = scaling.optional_number("high_freq_factor", 4.0);
    rope.original_max_position_embeddings = original(true);
    if (!(rope.high_freq_factor > rope.low_freq_factor))
      top.fail(field("high_freq_factor"), "must be greater than low_freq_factor");
  } else if (type == "dynamic") {
    rope.scaling = RopeScalingType::kDynamic;
    if (head_dim <= 2) top.fail("head_dim", "must be > 2 for dynamic NTK scaling");
  } else if (type == "yarn") {
    rope.scaling = RopeScalingType::kYarn;
    rope.original_max_position_embeddings = original(false);
    // transformers v5: without a factor, the extension ratio is the factor.
    if (!scaling.has("factor")) {
      rope.factor = static_cast<double>(max_position_embeddings) /
                    static_cast<double>(rope.original_max_position_embeddings);
    }
    // transformers reads beta_fast / beta_slow with `or`: 0 means the default too.
    rope.beta_fast = scaling.optional_number("beta_fast", 0.0);
    rope.beta_slow = scaling.optional_number("beta_slow", 0.0);
    if (rope.beta_fast == 0.0) rope.beta_fast = 32.0;
    if (rope.beta_slow == 0.0) rope.beta_slow = 1.0;
    if (!(rope.beta_fast > 0) || !(rope.beta_slow > 0))
      top.fail(field("beta_fast"), "and beta_slow must be > 0");
    rope.mscale = scaling.optional_number("mscale", 0.0);
    rope.mscale_all_dim = scaling.optional_number("mscale_all_dim", 0.0);
    rope.truncate = scaling.optional_bool("truncate", true);
  } else if (type == "longrope" || type == "su") {
    rope.scaling = RopeScalingType::kLongRope;
    rope.original_max_position_embeddings = original(false);
    if (!scaling.has("factor")) {
      rope.factor = static_cast<double>(max_position_embeddings) /
                    static_cast<double>(rope.original_max_position_embeddings);
    }
    const auto pairs = static_cast<size_t>(head_dim / 2);
    for (const char* key : {"short_factor", "long_factor"})
      if (!scaling.has(key)) top.fail(field(key), "is missing");
    rope.short_factor =
        number_list(scaling_json, "short_factor", top, field("short_factor"), pairs);
    rope.long_factor = number_list(scaling_json, "long_factor", top, field("long_factor"), pairs);
  } else {
    top.fail(field("rope_type"),
             fmt::format("'{}' is not supported (supported: default, linear, llama3, dynamic, "
                         "yarn, longrope)",
                         type));
  }
  return rope;
}

int64_t rope_context_length(const RopeConfig& rope) {
  switch (rope.scaling) {
    case RopeScalingType::kLinear:
    case RopeScalingType::kDynamic:
      return static_cast<int64_t>(static_cast<double>(rope.max_position_embeddings) * rope.factor);
    case RopeScalingType::kYarn:
      return static_cast<int64_t>(static_cast<double>(rope.original_max_position_embeddings) *
                                  rope.factor);
    default:
      return rope.max_position_embeddings;
  }
}

RopeTables rope_tables(const RopeConfig& rope, int head_dim, int64_t max_model_len) {
  const int64_t context = max_model_len > 0 ? max_model_len : rope_context_length(rope);
  switch (rope.scaling) {
    case RopeScalingType::kDynamic:
      return dynamic_tables(rope, head_dim, context);
    case RopeScalingType::kYarn:
      return yarn_tables(rope, head_dim);
    case RopeScalingType::kLongRope:
      return longrope_tables(rope, head_dim, context);
    default:
      return RopeTables{scaled_inv_freq(rope, head_dim), 1.0f};
  }
}

std::vector<float> rope_inv_freq(const RopeConfig& rope, int head_dim) {
  return rope_tables(rope, head_dim, 0).inv_freq;
}

}  // namespace pagoda
