#pragma once
// The architecture registry: config.json's architectures[0] -> a factory that builds the model.
// A new family is one file in model/arch/, one line in registry.cc and one golden test.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "model/config.h"
#include "model/loader/safetensors.h"
#include "model/model.h"
#include "ops/op_context.h"

namespace pagoda {

/// How one architecture is built: which tensors it expects (so dummy weights can be made) and how
/// the model object is constructed from checked weights.
struct ArchitectureEntry {
  struct TensorSpec {
    std::string name;
    Shape shape;
  };
  std::function<std::vector<TensorSpec>(const ModelConfig&)> expected_tensors;
  /// ctx: the thread pool and kernel settings the CPU model runs its ops with.
  std::function<std::unique_ptr<Model>(const ModelConfig&, WeightStore, const OpContext&)> build;
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

// One registration function per family file in model/arch/.
void register_llama_family(ArchitectureRegistry& registry);  // Llama, Mistral
void register_qwen_family(ArchitectureRegistry& registry);   // Qwen2, Qwen3

}  // namespace pagoda
