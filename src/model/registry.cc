#include "model/registry.h"

#include <fmt/format.h>

#include "core/status.h"
#include "model/quant/quant_config.h"

namespace pagoda {

const ArchitectureRegistry& ArchitectureRegistry::global() {
  static const ArchitectureRegistry registry = [] {
    ArchitectureRegistry r;
    register_llama_family(r);
    register_qwen_family(r);
    register_phi3_family(r);
    register_gemma_family(r);
    return r;
  }();
  return registry;
}

void ArchitectureRegistry::add(const std::string& name, ArchitectureEntry entry) {
  PAGODA_CHECK(entries_.emplace(name, std::move(entry)).second, "architecture {} registered twice",
               name);
}

const ArchitectureEntry& ArchitectureRegistry::find(const std::string& name,
                                                    const std::string& source) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) {
    throw InvalidArgument(
        fmt::format("{}: field 'architectures': '{}' is not supported (supported: {})", source,
                    name, fmt::join(names(), ", ")));
  }
  return it->second;
}

ModelDefinition define_model(const ModelConfig& config, const DefinitionOptions& options) {
  ModelDefinition d = ArchitectureRegistry::global()
                          .find(config.architecture, config.source)
                          .define(config, options);
  // The attention's checkpoint module is the parent of its q (or fused qkv) projection's:
  // "model.layers.3.self_attn.q_proj" -> "model.layers.3.self_attn".
  for (LayerDef& l : d.layers) {
    const std::string& q = l.qkv.sources.at(0).prefix;
    l.attention.module = q.substr(0, q.rfind('.'));
  }
  apply_quant_config(read_quant_config(config, options.quantization, options.dummy_weights), d);
  return d;
}

std::vector<std::string> ArchitectureRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, entry] : entries_) out.push_back(name);
  return out;
}

}  // namespace pagoda
