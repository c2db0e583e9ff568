#pragma once
// A request's structured_outputs as a structured::Constraint. Header-only, so that the OpenAI
// protocol layer (built without the engine's code) validates constraints with the same mapping.
#include "sampling/sampling_params.h"
#include "structured/constraint.h"

namespace pagoda {

/// The constraint so asks for (exactly one kind set: SamplingParams::validate checks).
[[nodiscard]] inline structured::Constraint constraint_of(const StructuredOutputsParams& so) {
  using Kind = structured::Constraint::Kind;
  structured::Constraint c;
  if (so.json) {
    c.kind = Kind::kJsonSchema;
    c.text = *so.json;
  } else if (so.regex) {
    c.kind = Kind::kRegex;
    c.text = *so.regex;
  } else if (so.choice) {
    c.kind = Kind::kChoice;
    c.choices = *so.choice;
  } else if (so.grammar) {
    c.kind = Kind::kGrammar;
    c.text = *so.grammar;
  } else if (so.structural_tag) {
    c.kind = Kind::kStructuralTag;
    c.text = *so.structural_tag;
  } else {
    c.kind = Kind::kJsonObject;
  }
  c.json.any_whitespace = !so.disable_any_whitespace;
  c.json.whitespace_pattern = so.whitespace_pattern;
  // Only an explicit false asks for JSON Schema's default (any unlisted property).
  c.json.unlisted_properties = so.disable_additional_properties == false;
  return c;
}

}  // namespace pagoda
