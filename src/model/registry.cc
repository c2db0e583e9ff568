#include "model/registry.h"

#include <fmt/format.h>

#include "core/status.h"

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
  return ArchitectureRegistry::global()
      .find(config.architecture, config.source)
      .define(config, options);
}

std::vector<std::string> ArchitectureRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, entry] : entries_) out.push_back(name);
  return out;
}

}  // namespace pagoda
