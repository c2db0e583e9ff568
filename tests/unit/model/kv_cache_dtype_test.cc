// The quantized KV cache of the CPU model: the cache's dtype from --kv-cache-dtype and the
// checkpoint, the per-layer k/v scales read from a checkpoint (both spellings vLLM reads) or
// calculated, the storage of codes (copy-on-write, export and import by the spec's byte counts),
// and the pool's capacity, which grows by the byte ratio.
#include <cstring>
#include <filesystem>
#include <numeric>

#include <gtest/gtest.h>

#include "core/half.h"
#include "core/status.h"
#include "kv/kv_cache_config.h"
#include "kv/kv_cache_spec.h"
#include "model/kv_cache_scales.h"
#include "model/kv_cache_storage.h"
#include "model/model.h"
#include "model/registry.h"
#include "test_checkpoint.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using testing::RawTensor;
using testing::TempDir;

const std::string kStories = std::string(PAGODA_SOURCE_DIR) + "/models/stories260K";

RawTensor f32_scalar(float v, std::vector<int64_t> shape) {
  std::string bytes(4, '\0');
  std::memcpy(bytes.data(), &v, 4);
  return RawTensor{"F32", std::move(shape), bytes};
}

RawTensor bf16_scalar(float v) {
  const uint16_t h = float_to_bf16(v);
  std::string bytes(2, '\0');
  std::memcpy(bytes.data(), &h, 2);
  return RawTensor{"BF16", {}, bytes};
}

/// stories260K (5 layers) with extra tensors next to its weights.
struct StoriesWithScales {
  TempDir dir;
  explicit StoriesWithScales(const std::map<std::string, RawTensor>& extra) {
    for (const char* f : {"config.json", "generation_config.json"})
      fs::copy_file(fs::path(kStories) / f, dir.path() / f);
    auto tensors = testing::read_raw_tensors(kStories + "/model.safetensors");
    for (const auto& [name, t] : extra) tensors[name] = t;
    testing::write_file(dir.path() / "model.safetensors", testing::safetensors_bytes(tensors));
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

ModelDefinition stories_definition() {
  return define_model(load_model_config(kStories), DefinitionOptions{});
}

TEST(KVCacheDType, ResolvesTheFlagAndTheCheckpointsChoice) {
  ModelDefinition d = stories_definition();
  EXPECT_EQ(resolve_cpu_kv_cache_dtype(d, {}), DType::kF32);
  EXPECT_EQ(resolve_cpu_kv_cache_dtype(d, {"fp8", false}), DType::kF8E4M3);
  EXPECT_EQ(resolve_cpu_kv_cache_dtype(d, {"int8", true}), DType::kI8);
  EXPECT_EQ(resolve_cpu_kv_cache_dtype(d, {"bfloat16", false}), DType::kBF16);
  d.auto_kv_cache_dtype = DType::kF8E4M3;  // a ModelOpt checkpoint's kv_cache_quant_algo FP8
  EXPECT_EQ(resolve_cpu_kv_cache_dtype(d, {}), DType::kF8E4M3);
  EXPECT_EQ(resolve_cpu_kv_cache_dtype(d, {"bfloat16", false}), DType::kBF16);
  const std::string e = error_of([] {
    (void)resolve_cpu_kv_cache_dtype(stories_definition(), {"auto", true});
  });
  EXPECT_NE(e.find("--calculate-kv-scales: the KV cache is float32 (--kv-cache-dtype auto)"),
            std::string::npos)
      << e;
  EXPECT_NE(error_of([] {
              (void)resolve_cpu_kv_cache_dtype(stories_definition(), {"bfloat16", true});
            }).find("--calculate-kv-scales"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              (void)resolve_cpu_kv_cache_dtype(stories_definition(), {"fp4", false});
            }).find("--kv-cache-dtype 'fp4'"),
            std::string::npos);
}

TEST(KVCacheDType, ReadsCheckpointScalesInBothSpellings) {
  // Layer 0: compressed-tensors' self_attn.k_scale ([] and [1]); layer 1: ModelOpt's
  // self_attn.k_proj.k_scale in bf16; the others have none (1.0).
  StoriesWithScales ckpt({{"model.layers.0.self_attn.k_scale", f32_scalar(0.5f, {})},
                          {"model.layers.0.self_attn.v_scale", f32_scalar(0.25f, {1})},
                          {"model.layers.1.self_attn.k_proj.k_scale", bf16_scalar(0.125f)},
                          {"model.layers.1.self_attn.v_proj.v_scale", bf16_scalar(2.0f)}});
  const ModelDefinition d = stories_definition();
  const WeightStore w = WeightStore::open_directory(ckpt.dir.str());
  KVScaleSource source;
  auto s = read_kv_cache_scales(d, w, DType::kF8E4M3, false, &source);
  ASSERT_EQ(s.size(), 5u);
  EXPECT_EQ(source.from_checkpoint, 2);
  EXPECT_EQ(s[0].k, 0.5f);
  EXPECT_EQ(s[0].v, 0.25f);
  EXPECT_EQ(s[1].k, 0.125f);
  EXPECT_EQ(s[1].v, 2.0f);
  EXPECT_EQ(s[2].k, 1.0f);
  EXPECT_EQ(s[4].v, 1.0f);
  // int8: the fp8-calibrated scale maps the same largest value (448 codes) to 127 codes.
  s = read_kv_cache_scales(d, w, DType::kI8, false, &source);
  EXPECT_FLOAT_EQ(s[0].k, 0.5f * 448 / 127);
  // --calculate-kv-scales and unscaled caches leave 1.0 (the first forward sets the former).
  s = read_kv_cache_scales(d, w, DType::kF8E4M3, true, &source);
  EXPECT_TRUE(source.calculated);
  EXPECT_EQ(s[0].k, 1.0f);
  s = read_kv_cache_scales(d, w, DType::kBF16, false, &source);
  EXPECT_EQ(source.from_checkpoint, 0);
  EXPECT_EQ(s[1].v, 1.0f);

  // Through load_model: the model holds an fp8 cache, a quarter of the fp32 bytes.
  ThreadPool pool(1);
  LoadOptions options;
  options.kv_cache.dtype = "fp8";
  const auto model = load_model(ckpt.dir.str(), options, pool);
  EXPECT_EQ(model->kv_cache_spec().dtype, DType::kF8E4M3);
  const auto dense = load_model(ckpt.dir.str(), LoadOptions{}, pool);
  EXPECT_EQ(dense->kv_cache_spec().bytes_per_token(), 4 * model->kv_cache_spec().bytes_per_token());
}

TEST(KVCacheDType, RefusesBrokenScalesNamingTheTensor) {
  const ModelDefinition d = stories_definition();
  KVScaleSource source;
  {
    StoriesWithScales ckpt({{"model.layers.2.self_attn.k_scale", f32_scalar(-1.0f, {})},
                            {"model.layers.2.self_attn.v_scale", f32_scalar(1.0f, {})}});
    const WeightStore w = WeightStore::open_directory(ckpt.dir.str());
    const std::string e =
        error_of([&] { (void)read_kv_cache_scales(d, w, DType::kF8E4M3, false, &source); });
    EXPECT_NE(e.find("'model.layers.2.self_attn.k_scale'"), std::string::npos) << e;
    EXPECT_NE(e.find("must be one positive finite float"), std::string::npos) << e;
  }
  {
    std::string two(8, '\0');
    StoriesWithScales ckpt({{"model.layers.0.self_attn.k_scale", RawTensor{"F32", {2}, two}},
                            {"model.layers.0.self_attn.v_scale", f32_scalar(1.0f, {})}});
    const WeightStore w = WeightStore::open_directory(ckpt.dir.str());
    EXPECT_NE(error_of([&] {
                (void)read_kv_cache_scales(d, w, DType::kI8, false, &source);
              }).find("float32 [2]"),
              std::string::npos);
  }
  {
    StoriesWithScales ckpt({{"model.layers.3.self_attn.v_scale", f32_scalar(1.0f, {})}});
    const WeightStore w = WeightStore::open_directory(ckpt.dir.str());
    const std::string e =
        error_of([&] { (void)read_kv_cache_scales(d, w, DType::kF8E4M3, false, &source); });
    EXPECT_NE(e.find("layer 3 has a model.layers.3.self_attn.v_scale but no k scale"),
              std::string::npos)
        << e;
  }
}

TEST(KVCacheDType, CalculatesScalesAsVllm) {
  const std::vector<float> k = {0.5f, -12.5f, 3.0f}, v = {1.0f, 2.0f, -5.0f};
  cpu::KVScales s = calculated_kv_scales(k.data(), v.data(), 3, DType::kF8E4M3);
  EXPECT_FLOAT_EQ(s.k, 12.5f / 200);  // K_SCALE_CONSTANT
  EXPECT_FLOAT_EQ(s.v, 5.0f / 100);   // V_SCALE_CONSTANT
  s = calculated_kv_scales(k.data(), v.data(), 3, DType::kI8);
  EXPECT_FLOAT_EQ(s.k, 12.5f / 127);
  EXPECT_FLOAT_EQ(s.v, 5.0f / 127);
  const std::vector<float> zeros(3, 0.0f);
  s = calculated_kv_scales(zeros.data(), zeros.data(), 3, DType::kF8E4M3);
  EXPECT_EQ(s.k, 1.0f);
  EXPECT_EQ(s.v, 1.0f);
}

TEST(KVCacheDType, StorageCopiesExportsAndImportsCodes) {
  const kv::KVCacheSpec spec{3, 2, 8, DType::kF8E4M3, kv::KVLayout::kTokenMajor};
  KVCacheStorage storage(spec, 4, 4);
  EXPECT_EQ(storage.key_cache(0).dtype, DType::kF8E4M3);
  EXPECT_EQ(storage.layout().dtype, DType::kF8E4M3);
  const auto block_bytes = static_cast<size_t>(spec.block_bytes(4));  // 3 x 2 x 4 x 2 x 8 = 384
  ASSERT_EQ(block_bytes, 384u);
  std::vector<std::byte> in(block_bytes), out(block_bytes);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::byte>(i * 7 + 1);
  storage.import_block(2, in);
  storage.copy_block(2, 3);  // copy-on-write of a fork
  storage.export_block(3, out);
  EXPECT_EQ(in, out);
  // The export is [layer][K, V][block]: layer 1's V is its fourth part, bytes [3 x 64, 4 x 64).
  const auto layer_bytes = static_cast<size_t>(spec.layer_block_bytes(4));
  EXPECT_EQ(std::memcmp(static_cast<const char*>(storage.value_cache(1).data) + 3 * layer_bytes,
                        in.data() + 3 * layer_bytes, layer_bytes),
            0);
}

TEST(KVCacheDType, CapacityGrowsByTheByteRatio) {
  // The pool's blocks for the memory of 1000 fp32 blocks of stories260K's cache (the engine's
  // sizing, kv::num_blocks_for_memory): fp8 and int8 hold 4x the tokens, bf16 and f16 2x.
  ThreadPool pool(1);
  const auto dense = load_model(kStories, LoadOptions{}, pool);
  const int64_t memory = 1000 * dense->kv_cache_spec().block_bytes(16);
  const int dense_blocks =
      kv::num_blocks_for_memory(memory, 16, dense->kv_cache_spec().bytes_per_token());
  for (const auto& [flag, ratio] :
       {std::pair{"fp8", 4}, std::pair{"fp8_e5m2", 4}, std::pair{"int8", 4},
        std::pair{"bfloat16", 2}, std::pair{"float16", 2}}) {
    LoadOptions options;
    options.kv_cache.dtype = flag;
    const auto model = load_model(kStories, options, pool);
    const int blocks =
        kv::num_blocks_for_memory(memory, 16, model->kv_cache_spec().bytes_per_token());
    EXPECT_EQ(blocks, ratio * dense_blocks) << flag;
    EXPECT_EQ(dense_blocks, 1000);
  }
}

}  // namespace
}  // namespace pagoda
