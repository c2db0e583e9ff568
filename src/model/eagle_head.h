#pragma once
// EAGLE draft heads in the Hugging Face layouts vLLM loads (definition.h, EagleHeadDef, has the
// computation). A head is a directory with config.json (a Llama config of one layer) and
// safetensors:
//  - EAGLE-1 (e.g. yuhuili/EAGLE-LLaMA3-Instruct-8B): fc.weight [hidden, 2 hidden] (fc.bias
//    optional), layers.0.{self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,
//    down}_proj} (no input_layernorm); embed_tokens.weight and lm_head.weight optional, else the
//    target's (its embedding again when its LM head is tied).
//  - EAGLE-3 (e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B): fc.weight [hidden, 3 target_hidden],
//    midlayer.{input_layernorm, hidden_norm, self_attn.* over 2 hidden, post_attention_layernorm,
//    mlp.*} (or layers.0.*), norm.weight, lm_head.weight [draft_vocab_size, hidden], d2t
//    [draft_vocab_size] I64 when draft_vocab_size < vocab_size (t2d, when present, is not read);
//    embed_tokens.weight optional, else the target's. config.json may name the target layers
//    (eagle_config.eagle_aux_hidden_state_layer_ids, vLLM's indices: the input of layer i),
//    default 2, num_layers / 2 and num_layers - 3 of the target.
#include <memory>
#include <optional>
#include <string>

#include "core/thread_pool.h"
#include "model/model.h"

namespace pagoda {

/// Where an EAGLE head comes from.
struct EagleHeadOptions {
  int version = 1;         // 1 or 3
  std::string target_dir;  // the target's directory (its config; its embedding and LM head)
};

/// The definition of an EAGLE head of config `head` for `target`; layer_prefix is the checkpoint
/// prefix of its layer ("layers.0." or "midlayer."), fc_bias whether fc.bias exists. Throws
/// InvalidArgument naming the config field for heads pagoda cannot run.
[[nodiscard]] ModelDefinition define_eagle_head(const ModelConfig& head, const ModelConfig& target,
                                                const EagleHeadOptions& eagle,
                                                const std::string& layer_prefix, bool fc_bias,
                                                const DefinitionOptions& options);

/// An EAGLE head's configuration, definition and checkpoint, before any backend binds them.
struct EagleHeadCheckpoint {
  ModelConfig config;
  ModelDefinition definition;
  /// The head's tensors, with the target's embedding (and EAGLE-1's LM head) added under the
  /// head's names where the head has none, as vLLM shares them; empty for --load-format dummy
  /// (every tensor of the definition is then drawn, embedding and LM head included).
  std::optional<WeightStore> weights;
};

/// Opens an EAGLE head (no dtype conversion: each backend converts as it binds). Errors name the
/// file and the field or tensor.
[[nodiscard]] EagleHeadCheckpoint open_eagle_head(const std::string& dir,
                                                  const EagleHeadOptions& eagle,
                                                  const LoadOptions& options);

/// Loads an EAGLE head for the CPU (--load-format dummy: random weights of its definition,
/// embedding and LM head included). Errors name the file and the field or tensor.
[[nodiscard]] std::unique_ptr<Model> load_eagle_head(const std::string& dir,
                                                     const EagleHeadOptions& eagle,
                                                     const LoadOptions& options, ThreadPool& pool);

}  // namespace pagoda
