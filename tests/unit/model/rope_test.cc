// RoPE scalings (model/rope.h): config.json parsing in both dialects, and rope_tables against
// values computed here, in double precision, straight from the published formulas (YaRN: arXiv
// 2309.00071 as transformers implements its correction range; dynamic NTK; LongRoPE / Phi-3), with
// pagoda's static choices for the sequence-length dependent ones. To add a case: parse a config
// (inline JSON) and compare rope_tables with the formula written out here.
#include "model/rope.h"

#include <cmath>
#include <numbers>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/status.h"
#include "model/config.h"

namespace pagoda {
namespace {

using nlohmann::json;

json with_rope(const json& scaling, bool v5, double theta = 10000.0) {
  json j{{"architectures", {"Qwen2ForCausalLM"}},
         {"vocab_size", 100},
         {"hidden_size", 256},
         {"intermediate_size", 128},
         {"num_hidden_layers", 2},
         {"num_attention_heads", 4},
         {"max_position_embeddings", 4096}};  // head_dim 64
  if (v5) {
    j["rope_parameters"] = scaling;
    j["rope_parameters"]["rope_theta"] = theta;
  } else {
    j["rope_theta"] = theta;
    j["rope_scaling"] = scaling;
  }
  return j;
}

RopeConfig parse(const json& j) { return parse_model_config(j.dump(), "dir/config.json").rope; }

std::string error_of(const json& j) {
  try {
    (void)parse_model_config(j.dump(), "dir/config.json");
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

/// theta^(-2i/d) in double.
double plain(double theta, int i, int d) { return std::pow(theta, -2.0 * i / d); }

void expect_rel_near(const std::vector<float>& got, const std::vector<double>& want, double rel) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], rel * want[i]) << "pair " << i;
}

TEST(Rope, BothDialectsParseEveryScaling) {
  const json scalings[] = {
      {{"rope_type", "linear"}, {"factor", 2.0}},
      {{"rope_type", "dynamic"}, {"factor", 2.0}},
      {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 1024}},
      {{"rope_type", "longrope"},
       {"short_factor", std::vector<double>(32, 1.5)},
       {"long_factor", std::vector<double>(32, 3.0)},
       {"original_max_position_embeddings", 1024}},
  };
  for (const json& s : scalings) {
    SCOPED_TRACE(s.dump());
    const RopeConfig a = parse(with_rope(s, false)), b = parse(with_rope(s, true));
    EXPECT_NE(a.scaling, RopeScalingType::kNone);
    EXPECT_EQ(a.scaling, b.scaling);
    EXPECT_EQ(a.factor, b.factor);
    EXPECT_EQ(a.original_max_position_embeddings, b.original_max_position_embeddings);
    EXPECT_EQ(a.max_position_embeddings, 4096);
    for (int64_t len : {0, 512, 8192}) {
      const RopeTables ta = rope_tables(a, 64, len), tb = rope_tables(b, 64, len);
      EXPECT_EQ(ta.inv_freq, tb.inv_freq);
      EXPECT_EQ(ta.attention_factor, tb.attention_factor);
    }
  }
  // The older "type" key, and Phi-3's "su" for longrope.
  json su = {{"type", "su"},
             {"short_factor", std::vector<double>(32, 1.0)},
             {"long_factor", std::vector<double>(32, 2.0)}};
  json phi3 = with_rope(su, false);
  phi3["original_max_position_embeddings"] = 1024;  // Phi-3 keeps it at the top level
  const RopeConfig r = parse(phi3);
  EXPECT_EQ(r.scaling, RopeScalingType::kLongRope);
  EXPECT_EQ(r.original_max_position_embeddings, 1024);
  EXPECT_EQ(r.factor, 4.0);  // max_position_embeddings / original
  EXPECT_EQ(parse(with_rope({{"type", "dynamic"}, {"factor", 2.0}}, false)).scaling,
            RopeScalingType::kDynamic);
  // partial_rotary_factor 1.0 (what transformers v5 writes for Phi-3) is the full rotation.
  json full = with_rope({{"rope_type", "default"}, {"partial_rotary_factor", 1.0}}, true);
  full["partial_rotary_factor"] = 1.0;
  EXPECT_EQ(parse(full).scaling, RopeScalingType::kNone);
}

TEST(Rope, YarnMatchesTheFormula) {
  // Qwen's long-context recipe: factor 4 over the original 1024 positions (here head_dim 64).
  const RopeConfig rope = parse(with_rope(
      {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 1024}}, false,
      1000000.0));
  EXPECT_EQ(rope.beta_fast, 32.0);
  EXPECT_EQ(rope.beta_slow, 1.0);
  EXPECT_TRUE(rope.truncate);
  // The pairs whose wavelength fits beta_fast times into the original context keep their
  // frequency, those fitting fewer than beta_slow times are divided by the factor, and a linear
  // ramp over the pair index (bounds rounded outwards) blends in between.
  const int d = 64;
  const double theta = 1e6, s = 4.0, L = 1024;
  const auto dim_of = [&](double rotations) {
    return d * std::log(L / (rotations * 2 * std::numbers::pi)) / (2 * std::log(theta));
  };
  const double low = std::max(std::floor(dim_of(32)), 0.0);
  const double high = std::min(std::ceil(dim_of(1)), d - 1.0);
  ASSERT_LT(low, high);
  ASSERT_GT(high, 2);
  ASSERT_LT(high, d / 2 - 1);  // both regimes and the ramp occur
  std::vector<double> want;
  for (int i = 0; i < d / 2; ++i) {
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    want.push_back(plain(theta, i, d) / s * ramp + plain(theta, i, d) * (1 - ramp));
  }
  const RopeTables t = rope_tables(rope, d, 0);
  expect_rel_near(t.inv_freq, want, 2e-6);
  EXPECT_FLOAT_EQ(t.inv_freq[0], 1.0f);                                              // kept
  EXPECT_NEAR(t.inv_freq[31], plain(theta, 31, d) / s, 2e-6 * plain(theta, 31, d));  // divided
  EXPECT_NEAR(t.attention_factor, 0.1 * std::log(s) + 1, 1e-7);
  // YaRN is static: max_model_len changes nothing. vLLM's derived context: original * factor.
  EXPECT_EQ(rope_tables(rope, d, 1000).inv_freq, t.inv_freq);
  EXPECT_EQ(rope_context_length(rope), 4096);

  // DeepSeek's fields: explicit betas, mscale / mscale_all_dim, and a given attention_factor.
  json ds = {{"rope_type", "yarn"},
             {"factor", 40.0},
             {"beta_fast", 16},
             {"beta_slow", 2},
             {"mscale", 1.0},
             {"mscale_all_dim", 0.5},
             {"original_max_position_embeddings", 512}};
  RopeConfig r = parse(with_rope(ds, true));
  EXPECT_EQ(r.beta_fast, 16.0);
  EXPECT_EQ(r.beta_slow, 2.0);
  const double m = (0.1 * std::log(40.0) + 1) / (0.1 * 0.5 * std::log(40.0) + 1);
  EXPECT_NEAR(rope_tables(r, d, 0).attention_factor, m, 1e-6);
  ds["attention_factor"] = 1.25;
  EXPECT_FLOAT_EQ(rope_tables(parse(with_rope(ds, true)), d, 0).attention_factor, 1.25f);
  // Without truncation the ramp bounds stay fractional.
  ds.erase("attention_factor");
  ds["truncate"] = false;
  r = parse(with_rope(ds, true));
  EXPECT_FALSE(r.truncate);
  const auto dim16 = [&](double rot) {
    return d * std::log(512 / (rot * 2 * std::numbers::pi)) / (2 * std::log(10000.0));
  };
  const double lo = std::max(dim16(16), 0.0), hi = std::min(dim16(2), d - 1.0);
  const auto got = rope_tables(r, d, 0).inv_freq;
  for (int i = 0; i < d / 2; ++i) {
    const double ramp = std::clamp((i - lo) / (hi - lo), 0.0, 1.0);
    const double f = plain(10000.0, i, d);
    EXPECT_NEAR(got[static_cast<size_t>(i)], f / 40 * ramp + f * (1 - ramp), 2e-6 * f) << i;
  }
  // No factor: transformers v5 takes max_position_embeddings / original.
  EXPECT_EQ(
      parse(with_rope({{"rope_type", "yarn"}, {"original_max_position_embeddings", 1024}}, true))
          .factor,
      4.0);
  // No original_max_position_embeddings: max_position_embeddings is the original.
  EXPECT_EQ(parse(with_rope({{"rope_type", "yarn"}, {"factor", 2.0}}, false))
                .original_max_position_embeddings,
            4096);
}

TEST(Rope, DynamicNtkIsStaticAtMaxModelLen) {
  const RopeConfig rope = parse(with_rope({{"rope_type", "dynamic"}, {"factor", 2.0}}, false));
  const int d = 64;
  // Up to max_position_embeddings (4096): the unscaled frequencies, as transformers uses for
  // every sequence that fits.
  std::vector<double> unscaled;
  for (int i = 0; i < d / 2; ++i) unscaled.push_back(plain(10000.0, i, d));
  for (int64_t len : {1, 2048, 4096}) {
    const RopeTables t = rope_tables(rope, d, len);
    expect_rel_near(t.inv_freq, unscaled, 1e-6);
    EXPECT_EQ(t.attention_factor, 1.0f);
  }
  // Beyond: the NTK base at max_model_len, base * (s * L / max - (s - 1))^(d / (d - 2)).
  for (int64_t len : {6000, 8192}) {
    const double base = 10000.0 * std::pow(2.0 * static_cast<double>(len) / 4096 - 1.0,
                                           static_cast<double>(d) / (d - 2));
    std::vector<double> want;
    for (int i = 0; i < d / 2; ++i) want.push_back(plain(base, i, d));
    expect_rel_near(rope_tables(rope, d, len).inv_freq, want, 2e-6);
  }
  // vLLM's derived context (the default max_model_len) is max_position_embeddings * factor.
  EXPECT_EQ(rope_context_length(rope), 8192);
  EXPECT_EQ(rope_tables(rope, d, 0).inv_freq, rope_tables(rope, d, 8192).inv_freq);
}

TEST(Rope, LongRopeChoosesItsFactorsFromMaxModelLen) {
  std::vector<double> short_f, long_f;
  for (int i = 0; i < 32; ++i) {
    short_f.push_back(1.0 + 0.01 * i);
    long_f.push_back(std::pow(32.0, i / 31.0));
  }
  json phi3 =
      with_rope({{"type", "longrope"}, {"short_factor", short_f}, {"long_factor", long_f}}, false);
  phi3["max_position_embeddings"] = 131072;
  phi3["original_max_position_embeddings"] = 4096;
  const RopeConfig rope = parse(phi3);
  const int d = 64;
  const double af = std::sqrt(1 + std::log(131072.0 / 4096) / std::log(4096.0));
  const auto want = [&](const std::vector<double>& ext) {
    std::vector<double> w;
    for (int i = 0; i < d / 2; ++i) w.push_back(plain(10000.0, i, d) / ext[static_cast<size_t>(i)]);
    return w;
  };
  // max_model_len > original: long factors (the default: 131072); else short ones. The attention
  // factor comes from the configured extension either way.
  for (int64_t len : {0, 4097, 131072}) {
    const RopeTables t = rope_tables(rope, d, len);
    expect_rel_near(t.inv_freq, want(long_f), 1e-6);
    EXPECT_NEAR(t.attention_factor, af, 1e-6);
  }
  for (int64_t len : {1, 4096}) {
    const RopeTables t = rope_tables(rope, d, len);
    expect_rel_near(t.inv_freq, want(short_f), 1e-6);
    EXPECT_NEAR(t.attention_factor, af, 1e-6);
  }
  EXPECT_EQ(rope_context_length(rope), 131072);  // LongRoPE does not extend max_position
  // A given attention_factor wins; v5 keeps original_max_position_embeddings inside.
  json v5 = with_rope({{"rope_type", "longrope"},
                       {"short_factor", short_f},
                       {"long_factor", long_f},
                       {"attention_factor", 1.5},
                       {"original_max_position_embeddings", 1024}},
                      true);
  const RopeConfig r5 = parse(v5);
  EXPECT_EQ(r5.original_max_position_embeddings, 1024);
  v5["original_max_position_embeddings"] = 2048;  // the top level wins, as in transformers v5
  EXPECT_EQ(parse(v5).original_max_position_embeddings, 2048);
  EXPECT_FLOAT_EQ(rope_tables(r5, d, 0).attention_factor, 1.5f);
}

TEST(Rope, ErrorsNameTheField) {
  const auto expect_error = [](const json& j, const std::string& part) {
    const std::string e = error_of(j);
    EXPECT_NE(e.find("dir/config.json"), std::string::npos) << e;
    EXPECT_NE(e.find(part), std::string::npos) << "'" << part << "' not in: " << e;
  };
  json j = with_rope({{"rope_type", "default"}}, false);
  j["partial_rotary_factor"] = 0.75;  // Phi-4-mini
  expect_error(j, "'partial_rotary_factor' other than 1.0");
  j = with_rope({{"rope_type", "default"}, {"partial_rotary_factor", 0.5}}, true);
  expect_error(j, "'rope_parameters.partial_rotary_factor'");
  j = with_rope({{"rope_type", "longrope"}, {"long_factor", std::vector<double>(32, 1.0)}}, false);
  expect_error(j, "'rope_scaling.short_factor' is missing");
  j = with_rope({{"rope_type", "longrope"},
                 {"short_factor", std::vector<double>(31, 1.0)},
                 {"long_factor", std::vector<double>(32, 1.0)}},
                true);
  expect_error(j, "'rope_parameters.short_factor' must hold head_dim / 2 = 32 numbers, holds 31");
  j = with_rope({{"rope_type", "longrope"},
                 {"short_factor", std::vector<double>(32, 1.0)},
                 {"long_factor", "wide"}},
                false);
  expect_error(j, "'rope_scaling.long_factor' must be a list of numbers");
  j = with_rope({{"rope_type", "yarn"}, {"factor", 0.5}}, false);
  expect_error(j, "'rope_scaling.factor' must be >= 1");
  j = with_rope({{"rope_type", "mrope"}}, true);
  expect_error(j, "'rope_parameters.rope_type' 'mrope' is not supported");
  j = with_rope({{"rope_type", "default"}}, true);
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}}},
                          {"sliding_attention", {{"rope_type", "default"}}}};
  expect_error(j, "'rope_parameters' per layer type");
}

}  // namespace
}  // namespace pagoda
