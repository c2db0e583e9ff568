#pragma once
// The architecture registry: config.json's architectures[0] -> the family's definition builder. A
// new family is one file in model/arch/, one line in registry.cc and its golden tests; both
// backends build from the ModelDefinition it returns.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/definition.h"

namespace pagoda {

/// What shapes a definition besides config.json: the engine's settings.
struct DefinitionOptions {
  /// The longest context the engine serves (--max-model-len); 0: the model's context
  /// (rope_context_length). RoPE scalings that depend on it (LongRoPE's long factors, dynamic
  /// NTK) read it.
  int64_t max_model_len = 0;
};

/// How one architecture is defined.
struct ArchitectureEntry {
  /// The family's definition of a checkpoint; InvalidArgument naming the config field it does not
  /// support.
  std::function<ModelDefinition(const ModelConfig&, const DefinitionOptions&)> define;
};

/// Maps architecture names to entries.
class ArchitectureRegistry {
 public:
  /// The registry holding every architecture pagoda supports.
  [[nodiscard]] static const ArchitectureRegistry& global();

  void add(const std::string& name, ArchitectureEntry entry);
  /// The entry for `name`; throws InvalidArgument listing the supported names.
  [[nodiscard]] const ArchitectureEntry& find(const std::string& name,
                                              const std::string& source) const;
  [[nodiscard]] std::vector<std::string> names() const;

 private:
  std::map<std::string, ArchitectureEntry> entries_;
};

/// The definition of config's architecture (config.source names the file in errors).
[[nodiscard]] ModelDefinition define_model(const ModelConfig& config,
                                           const DefinitionOptions& options = {});

// One registration function per family file in model/arch/.
void register_llama_family(ArchitectureRegistry& registry);  // Llama, Mistral
void register_qwen_family(ArchitectureRegistry& registry);   // Qwen2, Qwen3
void register_phi3_family(ArchitectureRegistry& registry);   // Phi-3
void register_gemma_family(ArchitectureRegistry& registry);  // Gemma-2

}  // namespace pagoda
