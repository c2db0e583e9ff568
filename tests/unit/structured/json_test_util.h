#pragma once
// An independent JSON Schema validator for the subset the compiler supports, a generator of
// random valid instances, and the writers of JSON text in the grammar's formats: the ground
// truth of the schema property tests.
#include <optional>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

namespace pagoda::structured::testing {

using Json = nlohmann::ordered_json;

/// Whether instance validates against schema; root resolves "#/..." references.
[[nodiscard]] bool validates(const Json& schema, const Json& instance, const Json& root);

/// A random valid instance (objects in declared property order, additional properties last),
/// or nullopt when this generator cannot make one (a pattern without "examples").
[[nodiscard]] std::optional<Json> random_instance(const Json& schema, const Json& root,
                                                  std::mt19937& rng, int depth = 0);

/// JSON text: with rng, random whitespace between tokens; without, Python's json.dumps style
/// (", " and ": ").
[[nodiscard]] std::string dump(const Json& v, std::mt19937* rng);

/// A random change of instance's value tree (likely, not surely, invalid).
[[nodiscard]] Json mutate(const Json& instance, std::mt19937& rng);

}  // namespace pagoda::structured::testing
