// EAGLE heads (model/eagle_head.h) on the CPU against a reference computed here in double: one
// token at position 0, where attention over the single key returns its value, so the whole head is
// a short chain of products. Random weights (norms included) for a head over stories260K (hidden
// 64, 8 heads of 8, 4 KV heads, MLP 172, vocabulary 512): EAGLE-1 with fc.bias and the target's
// tied embedding as its LM head, EAGLE-3 with a draft vocabulary of 256 mapped through d2t.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/eagle_head.h"
#include "test_checkpoint.h"

namespace pagoda {
namespace {

using testing::RawTensor;
using Vec = std::vector<double>;

const std::string kStories = std::string(PAGODA_SOURCE_DIR) + "/models/stories260K";
constexpr int64_t kH = 64, kQ = 64, kKV = 32, kInter = 172, kVocab = 512, kHeadDim = 8;

struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<float> v;
  [[nodiscard]] Vec apply(const Vec& x) const {
    Vec y(static_cast<size_t>(rows), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        y[static_cast<size_t>(r)] +=
            v[static_cast<size_t>(r * cols + c)] * x[static_cast<size_t>(c)];
    return y;
  }
};

class Writer {
 public:
  explicit Writer(uint32_t seed) : rng_(seed) {}
  Mat matrix(const std::string& name, int64_t rows, int64_t cols, float scale) {
    Mat m{rows, cols, std::vector<float>(static_cast<size_t>(rows * cols))};
    std::uniform_real_distribution<float> u(-scale, scale);
    for (float& x : m.v) x = u(rng_);
    put(name, {rows, cols}, m.v);
    return m;
  }
  std::vector<float> vector(const std::string& name, int64_t n, float center, float scale) {
    std::vector<float> v(static_cast<size_t>(n));
    std::uniform_real_distribution<float> u(center - scale, center + scale);
    for (float& x : v) x = u(rng_);
    put(name, {n}, v);
    return v;
  }
  void put(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    tensors[name] = RawTensor{"F32", std::move(shape),
                              std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4)};
  }
  std::map<std::string, RawTensor> tensors;

 private:
  std::mt19937 rng_;
};

Vec rms(const Vec& x, const std::vector<float>& w) {
  double ss = 0;
  for (double a : x) ss += a * a;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + 1e-5);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
  return y;
}

Vec add(const Vec& a, const Vec& b) {
  Vec y(a.size());
  for (size_t i = 0; i < a.size(); ++i) y[i] = a[i] + b[i];
  return y;
}

Vec cat(const Vec& a, const Vec& b) {
  Vec y = a;
  y.insert(y.end(), b.begin(), b.end());
  return y;
}

/// The layer's attention and MLP for one token at position 0 over attention input `a` and
/// residual `x`: the residual stream after the layer.
struct LayerRef {
  Mat q, k, v, o, gate, up, down;
  std::vector<float> post_norm;
  LayerRef(Writer& w, const std::string& p, int64_t in) {
    q = w.matrix(p + "self_attn.q_proj.weight", kQ, in, 0.1f);
    k = w.matrix(p + "self_attn.k_proj.weight", kKV, in, 0.1f);
    v = w.matrix(p + "self_attn.v_proj.weight", kKV, in, 0.1f);
    o = w.matrix(p + "self_attn.o_proj.weight", kH, kQ, 0.1f);
    gate = w.matrix(p + "mlp.gate_proj.weight", kInter, kH, 0.1f);
    up = w.matrix(p + "mlp.up_proj.weight", kInter, kH, 0.1f);
    down = w.matrix(p + "mlp.down_proj.weight", kH, kInter, 0.1f);
    post_norm = w.vector(p + "post_attention_layernorm.weight", kH, 1.0f, 0.3f);
  }
  [[nodiscard]] Vec run(const Vec& a, const Vec& x) const {
    // A single key: each query head's output is the value of its KV head (8 heads over 4).
    const Vec values = v.apply(a);
    Vec attn(static_cast<size_t>(kQ));
    for (int64_t head = 0; head < kQ / kHeadDim; ++head)
      for (int64_t d = 0; d < kHeadDim; ++d)
        attn[static_cast<size_t>(head * kHeadDim + d)] =
            values[static_cast<size_t>((head / 2) * kHeadDim + d)];
    const Vec r1 = add(x, o.apply(attn));
    const Vec n = rms(r1, post_norm);
    const Vec g = gate.apply(n), u = up.apply(n);
    Vec act(g.size());
    for (size_t i = 0; i < g.size(); ++i) act[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    return add(r1, down.apply(act));
  }
};

Vec embedding(int32_t token) {
  static const auto target = testing::read_raw_tensors(kStories + "/model.safetensors");
  const RawTensor& e = target.at("model.embed_tokens.weight");
  const auto* f = reinterpret_cast<const float*>(e.bytes.data()) + token * kH;
  return Vec(f, f + kH);
}

/// Runs the head on one token at position 0 with input hidden `h`; returns its logits and
/// leaves its output (the residual stream after the layer) in `g`.
std::vector<float> run_head(Model& head, int32_t token, const std::vector<float>& h,
                            std::vector<float>& g) {
  head.init_kv_cache(2, 16);
  const std::vector<int32_t> ids{token}, pos{0}, qsl{0, 1}, lens{1}, table{1}, rows{0}, layers{0};
  const std::vector<int64_t> slots{16};
  ForwardBatch batch{ids, pos, qsl, lens, table, 1, slots, rows};
  batch.hidden_layers = layers;
  batch.input_hidden = h;
  batch.input_hidden_width = static_cast<int64_t>(h.size());
  const std::span<float> logits = head.forward(batch);
  const std::span<float> out = head.hidden_states();
  g.assign(out.begin(), out.end());
  return {logits.begin(), logits.end()};
}

void expect_close(const std::vector<float>& got, const Vec& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_TRUE(std::isinf(got[i]) && got[i] < 0) << what << " " << i;
    } else {
      EXPECT_NEAR(got[i], want[i], tol * (1.0 + std::abs(want[i]))) << what << " " << i;
    }
  }
}

nlohmann::json head_config() {
  std::ifstream in(kStories + "/config.json");
  nlohmann::json c = nlohmann::json::parse(in);
  c["num_hidden_layers"] = 1;
  return c;
}

TEST(EagleHead, Eagle1MatchesTheReference) {
  testing::TempDir dir;
  Writer w(5);
  const Mat fc = w.matrix("fc.weight", kH, 2 * kH, 0.1f);
  const std::vector<float> fc_bias = w.vector("fc.bias", kH, 0.0f, 0.1f);
  const LayerRef layer(w, "layers.0.", kH);
  testing::write_file(dir.path() / "config.json", head_config().dump());
  testing::write_file(dir.path() / "model.safetensors", testing::safetensors_bytes(w.tensors));
  ThreadPool pool(1);
  const std::unique_ptr<Model> head = load_eagle_head(dir.str(), {1, kStories}, {}, pool);
  ASSERT_EQ(head->definition().eagle->target_layers, std::vector<int32_t>{5});  // final-normed
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> h(kH);
  for (float& x : h) x = u(rng);
  std::vector<float> g;
  const std::vector<float> logits = run_head(*head, 42, h, g);
  // x = fc([embed | h]) + b; the layer without an input norm; logits = E g (tied target).
  Vec x = add(fc.apply(cat(embedding(42), Vec(h.begin(), h.end()))),
              Vec(fc_bias.begin(), fc_bias.end()));
  const Vec want_g = layer.run(x, x);
  expect_close(g, want_g, 1e-4, "g");
  Vec want_logits(kVocab);
  for (int32_t t = 0; t < kVocab; ++t) {
    const Vec e = embedding(t);
    for (int64_t i = 0; i < kH; ++i) want_logits[static_cast<size_t>(t)] += e[i] * want_g[i];
  }
  expect_close(logits, want_logits, 1e-4, "logits");
}

TEST(EagleHead, Eagle3MatchesTheReference) {
  testing::TempDir dir;
  Writer w(7);
  const Mat fc = w.matrix("fc.weight", kH, 3 * kH, 0.1f);
  const std::vector<float> input_norm = w.vector("midlayer.input_layernorm.weight", kH, 1, 0.3f);
  const std::vector<float> hidden_norm = w.vector("midlayer.hidden_norm.weight", kH, 1, 0.3f);
  const LayerRef layer(w, "midlayer.", 2 * kH);
  const std::vector<float> norm = w.vector("norm.weight", kH, 1.0f, 0.3f);
  const Mat head_rows = w.matrix("lm_head.weight", 256, kH, 0.2f);
  std::vector<int64_t> d2t(256);
  for (int64_t i = 0; i < 256; ++i) d2t[static_cast<size_t>(i)] = i;  // draft i -> target 2i
  w.tensors["d2t"] = RawTensor{
      "I64", {256}, std::string(reinterpret_cast<const char*>(d2t.data()), d2t.size() * 8)};
  nlohmann::json c = head_config();
  c["architectures"] = {"LlamaForCausalLMEagle3"};
  c["draft_vocab_size"] = 256;
  c["eagle_config"] = {{"eagle_aux_hidden_state_layer_ids", {1, 2, 4}}};
  testing::write_file(dir.path() / "config.json", c.dump());
  testing::write_file(dir.path() / "model.safetensors", testing::safetensors_bytes(w.tensors));
  ThreadPool pool(1);
  const std::unique_ptr<Model> head = load_eagle_head(dir.str(), {3, kStories}, {}, pool);
  ASSERT_EQ(head->definition().eagle->target_layers, (std::vector<int32_t>{0, 1, 3}));
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> h(3 * kH);
  for (float& x : h) x = u(rng);
  std::vector<float> g;
  const std::vector<float> logits = run_head(*head, 7, h, g);
  const Vec x = fc.apply(Vec(h.begin(), h.end()));
  const Vec a = cat(rms(embedding(7), input_norm), rms(x, hidden_norm));
  const Vec want_g = layer.run(a, x);
  expect_close(g, want_g, 1e-4, "g");
  const Vec draft = head_rows.apply(rms(want_g, norm));
  Vec want(kVocab, -std::numeric_limits<double>::infinity());
  for (size_t i = 0; i < 256; ++i) want[2 * i] = draft[i];
  expect_close(logits, want, 1e-4, "logits");
  // Drafting further: the head's own output (width 64) skips fc.
  std::vector<float> g2;
  const std::vector<float> again = run_head(*head, 7, std::vector<float>(g.begin(), g.end()), g2);
  const Vec x2(g.begin(), g.end());
  expect_close(g2, layer.run(cat(rms(embedding(7), input_norm), rms(x2, hidden_norm)), x2), 1e-4,
               "g from g");
}

}  // namespace
}  // namespace pagoda
