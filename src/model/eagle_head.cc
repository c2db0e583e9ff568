#include "model/eagle_head.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "model/arch/hf_decoder.h"
#include "model/config_reader.h"
#include "model/cpu_decoder.h"
#include "model/dummy_weights.h"

namespace pagoda {
namespace {

/// Replaces the leading `from` of a checkpoint name by `to` ("model.layers.0.x" -> "midlayer.x").
void rename(std::string& name, const std::string& from, const std::string& to) {
  if (name.rfind(from, 0) == 0) name = to + name.substr(from.size());
}

void rename_linear(LinearDef& l, const std::string& from, const std::string& to) {
  rename(l.name, from, to);
  for (LinearDef::Source& s : l.sources) rename(s.prefix, from, to);
}

LinearDef dense(const std::string& name, int64_t out, int64_t in, bool bias) {
  LinearDef l;
  l.name = name;
  l.out_segments = {out};
  l.in = in;
  l.sources = {{name, 0, 1}};
  l.bias = bias;
  l.shard = ShardDim::kNone;
  return l;
}

}  // namespace

ModelDefinition define_eagle_head(const ModelConfig& c, const ModelConfig& target,
                                  const EagleHeadOptions& eagle, const std::string& layer_prefix,
                                  bool fc_bias, const DefinitionOptions& options) {
  PAGODA_CHECK(eagle.version == 1 || eagle.version == 3, "EAGLE version {}", eagle.version);
  const ConfigReader reader(*c.json, c.source);
  if (c.num_layers != 1) {
    reader.fail("num_hidden_layers",
                fmt::format("is {}: pagoda runs EAGLE heads of one layer", c.num_layers));
  }
  if (c.vocab_size != target.vocab_size) {
    reader.fail("vocab_size", fmt::format("is {}, the target's {} (an EAGLE head predicts the "
                                          "target's tokens)",
                                          c.vocab_size, target.vocab_size));
  }
  HfDecoderStyle style;
  style.qkv_bias = style.o_bias = c.attention_bias;
  style.mlp_bias = c.mlp_bias;
  style.activation = activation_named(c, "hidden_act", c.hidden_act);
  ModelDefinition d = hf_decoder_definition(c, style, options);
  LayerDef& layer = d.layers.at(0);
  const std::string from = "model.layers.0.";
  for (NormDef* n : {&layer.input_norm, &layer.pre_mlp_norm}) rename(n->name, from, layer_prefix);
  for (LinearDef* l : {&layer.qkv, &layer.o, &layer.gate_up, &layer.down})
    rename_linear(*l, from, layer_prefix);
  rename(layer.attention.module, from, layer_prefix);
  d.embed_name = "embed_tokens.weight";
  d.final_norm.name = "norm.weight";
  d.lm_head_tied = false;  // lm_head.weight always exists (the target's when the head has none)
  const int64_t h = c.hidden_size;
  EagleHeadDef e;
  e.version = eagle.version;
  e.draft_vocab_size = c.vocab_size;
  if (eagle.version == 1) {
    e.fc = dense("fc", h, 2 * h, fc_bias);
    e.target_layers = {target.num_layers};  // the final-normed output
    if (h != target.hidden_size) {
      reader.fail("hidden_size", fmt::format("is {}, the target's {} (EAGLE-1 reads the target's "
                                             "hidden states as they are)",
                                             h, target.hidden_size));
    }
  } else {
    const int64_t target_hidden = reader.optional_int("target_hidden_size", target.hidden_size, 1);
    e.fc = dense("fc", h, 3 * target_hidden, fc_bias);
    e.hidden_norm = NormDef{layer_prefix + "hidden_norm.weight", h, 0.0f};
    layer.qkv.in = 2 * h;  // over concat(input_norm(embed), hidden_norm(x))
    e.draft_vocab_size = reader.optional_int("draft_vocab_size", c.vocab_size, 1);
    if (e.draft_vocab_size > c.vocab_size) {
      reader.fail("draft_vocab_size",
                  fmt::format("is {}, past vocab_size {}", e.draft_vocab_size, c.vocab_size));
    }
    if (e.draft_vocab_size < c.vocab_size) e.d2t_name = "d2t";
    d.lm_head.out_segments = {e.draft_vocab_size};
    // vLLM's indices i (the input of target layer i = the residual stream after layer i - 1).
    std::vector<int64_t> ids = {2, target.num_layers / 2, target.num_layers - 3};
    if (c.json->contains("eagle_config") && (*c.json)["eagle_config"].is_object() &&
        (*c.json)["eagle_config"].contains("eagle_aux_hidden_state_layer_ids")) {
      const nlohmann::json& list = (*c.json)["eagle_config"]["eagle_aux_hidden_state_layer_ids"];
      if (!list.is_array() || list.size() != 3) {
        reader.fail("eagle_config.eagle_aux_hidden_state_layer_ids", "must list three layers");
      }
      ids.clear();
      for (const nlohmann::json& x : list) {
        if (!x.is_number_integer()) {
          reader.fail("eagle_config.eagle_aux_hidden_state_layer_ids", "must list integers");
        }
        ids.push_back(x.get<int64_t>());
      }
    }
    for (const int64_t i : ids) {
      if (i < 0 || i >= target.num_layers) {
        reader.fail("eagle_config.eagle_aux_hidden_state_layer_ids",
                    fmt::format("names layer {} of a target of {} layers", i, target.num_layers));
      }
      e.target_layers.push_back(static_cast<int32_t>(i - 1));
    }
  }
  d.eagle = std::move(e);
  return d;
}

EagleHeadCheckpoint open_eagle_head(const std::string& dir, const EagleHeadOptions& eagle,
                                    const LoadOptions& options) {
  const ModelConfig config = load_model_config(dir);
  const ModelConfig target = load_model_config(eagle.target_dir);
  std::optional<WeightStore> weights;
  std::string prefix = eagle.version == 1 ? "layers.0." : "midlayer.";
  bool fc_bias = false;
  if (options.format != LoadFormat::kDummy) {
    weights = WeightStore::open_directory(dir);
    if (eagle.version == 3 && !weights->contains(prefix + "self_attn.q_proj.weight") &&
        weights->contains("layers.0.self_attn.q_proj.weight")) {
      prefix = "layers.0.";
    }
    fc_bias = weights->contains("fc.bias");
  }
  ModelDefinition definition =
      define_eagle_head(config, target, eagle, prefix, fc_bias, options.definition);
  if (weights) {
    // The target's embedding (and EAGLE-1's LM head) where the head has none, as vLLM shares them.
    std::vector<std::pair<std::string, std::string>> shared;
    const ModelDefinition target_def = define_model(target, options.definition);
    WeightStore target_weights = WeightStore::open_directory(eagle.target_dir);
    if (!weights->contains(definition.embed_name))
      shared.emplace_back(target_def.embed_name, definition.embed_name);
    if (!weights->contains("lm_head.weight")) {
      if (eagle.version == 3) {
        throw InvalidArgument(fmt::format("{}: an EAGLE-3 head needs its lm_head.weight", dir));
      }
      const std::string head = target_def.lm_head.sources.at(0).prefix + ".weight";
      shared.emplace_back(target_weights.contains(head) ? head : target_def.embed_name,
                          "lm_head.weight");
    }
    if (!shared.empty()) weights->take_from(std::move(target_weights), shared);
  }
  spdlog::info(
      "EAGLE-{} head {}: hidden {}, {} heads ({} kv), draft vocabulary {}, target layers "
      "{}",
      eagle.version, dir, config.hidden_size, config.num_heads, config.num_kv_heads,
      definition.eagle->draft_vocab_size, fmt::join(definition.eagle->target_layers, ", "));
  return EagleHeadCheckpoint{config, std::move(definition), std::move(weights)};
}

std::unique_ptr<Model> load_eagle_head(const std::string& dir, const EagleHeadOptions& eagle,
                                       const LoadOptions& options, ThreadPool& pool) {
  EagleHeadCheckpoint head = open_eagle_head(dir, eagle, options);
  WeightStore weights = make_empty_weight_store(dir);
  if (!head.weights) {
    weights =
        make_dummy_weights(head.definition.tensors(), options.dtype.value_or(head.config.dtype),
                           options.seed, pool, options.progress);
  } else {
    weights = std::move(*head.weights);
    if (options.dtype) (void)weights.convert_floats(*options.dtype, pool);
  }
  const OpContext ctx{
      &pool,
      {.batch_invariant = !options.cpu_onednn,
       .bf16 = options.cpu_bf16_round ? cpu::Bf16Matmul::kRound : cpu::Bf16Matmul::kExact}};
  return build_cpu_model(head.config, std::move(head.definition), std::move(weights), ctx,
                         options.kv_cache);
}

}  // namespace pagoda
