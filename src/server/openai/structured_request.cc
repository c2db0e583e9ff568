#include "server/openai/structured_request.h"

#include <fmt/format.h>

#include "core/status.h"
#include "engine/structured_constraint.h"
#include "server/openai/api_error.h"
#include "structured/automaton.h"

namespace pagoda::openai {
namespace {

bool is_set(const Json& v) {
  return !(v.is_null() || (v.is_boolean() && !v.get<bool>()) ||
           ((v.is_array() || v.is_object()) && v.empty()) ||
           (v.is_string() && v.get_ref<const std::string&>().empty()));
}

// A JSON Schema given as an object, or as its JSON text (vLLM accepts both).
std::string schema_text(const Json& v, const std::string& param) {
  if (v.is_object()) return v.dump();
  if (v.is_string()) {
    (void)parse_json_value(v.get<std::string>(), param);  // a 400 naming param when malformed
    return v.get<std::string>();
  }
  throw bad_request(fmt::format("'{}' must be a JSON Schema (an object or its JSON text)", param),
                    param);
}

std::string string_field(const Json& v, const std::string& param) {
  if (!v.is_string()) throw bad_request(fmt::format("'{}' must be a string", param), param);
  return v.get<std::string>();
}

std::vector<std::string> choices(const Json& v, const std::string& param) {
  if (!v.is_array() || v.empty()) {
    throw bad_request(fmt::format("'{}' must be a non-empty list of strings", param), param);
  }
  std::vector<std::string> out;
  for (const Json& c : v) out.push_back(string_field(c, param));
  return out;
}

bool bool_field(const Json& object, const char* key, const std::string& param) {
  return get_bool(object, key, field_path(param, key)).value_or(false);
}

StructuredOutputsParams read_structured_object(const Json& v) {
  const std::string param = "structured_outputs";
  if (!v.is_object()) throw bad_request("'structured_outputs' must be an object", param);
  reject_unknown_keys(
      v,
      {"json", "regex", "choice", "grammar", "json_object", "structural_tag", "disable_fallback",
       "disable_any_whitespace", "disable_additional_properties", "whitespace_pattern"},
      param);
  StructuredOutputsParams so;
  if (const Json* j = find_field(v, "json")) so.json = schema_text(*j, field_path(param, "json"));
  if (const Json* r = find_field(v, "regex"))
    so.regex = string_field(*r, field_path(param, "regex"));
  if (const Json* c = find_field(v, "choice")) so.choice = choices(*c, field_path(param, "choice"));
  if (const Json* g = find_field(v, "grammar")) {
    so.grammar = string_field(*g, field_path(param, "grammar"));
  }
  so.json_object = bool_field(v, "json_object", param);
  if (const Json* t = find_field(v, "structural_tag")) {
    so.structural_tag =
        t->is_object() ? t->dump() : string_field(*t, field_path(param, "structural_tag"));
  }
  (void)get_bool(v, "disable_fallback", field_path(param, "disable_fallback"));  // one backend
  so.disable_any_whitespace = bool_field(v, "disable_any_whitespace", param);
  so.disable_additional_properties = get_bool(v, "disable_additional_properties",
                                              field_path(param, "disable_additional_properties"));
  so.whitespace_pattern =
      get_string(v, "whitespace_pattern", field_path(param, "whitespace_pattern"));
  if (so.num_constraints() > 1) {
    throw bad_request(
        "'structured_outputs' may set only one of json, regex, choice, grammar, json_object and "
        "structural_tag",
        param);
  }
  return so;
}

std::optional<StructuredOutputsParams> read_response_format(const Json& body) {
  const Json* rf = find_field(body, "response_format");
  if (!rf) return std::nullopt;
  const std::string param = "response_format";
  if (!rf->is_object()) throw bad_request("'response_format' must be an object", param);
  reject_unknown_keys(*rf, {"type", "json_schema", "structures", "triggers"}, param);
  const std::optional<std::string> type = get_string(*rf, "type", "response_format.type");
  if (!type) throw bad_request("'response_format.type' is required", param);
  // Each type takes its own keys only.
  if (*type == "text" || *type == "json_object") {
    reject_unknown_keys(*rf, {"type"}, param);
  } else if (*type == "json_schema") {
    reject_unknown_keys(*rf, {"type", "json_schema"}, param);
  } else if (*type == "structural_tag") {
    reject_unknown_keys(*rf, {"type", "structures", "triggers"}, param);
  }
  StructuredOutputsParams so;
  if (*type == "text") return std::nullopt;
  if (*type == "json_object") {
    so.json_object = true;
  } else if (*type == "json_schema") {
    const Json* js = find_field(*rf, "json_schema");
    if (!js || !js->is_object()) {
      throw bad_request("'response_format.json_schema' must be an object with a 'schema'", param);
    }
    reject_unknown_keys(*js, {"name", "schema", "strict", "description"},
                        "response_format.json_schema");
    (void)get_string(*js, "name", "response_format.json_schema.name");
    (void)get_string(*js, "description", "response_format.json_schema.description");
    (void)get_bool(*js, "strict", "response_format.json_schema.strict");  // always strict here
    const Json* schema = find_field(*js, "schema");
    if (!schema) throw bad_request("'response_format.json_schema.schema' is required", param);
    so.json = schema_text(*schema, "response_format.json_schema.schema");
  } else if (*type == "structural_tag") {
    so.structural_tag = rf->dump();
  } else {
    throw bad_request(fmt::format("response_format type '{}' is not supported (text, json_object, "
                                  "json_schema, structural_tag)",
                                  *type),
                      param);
  }
  return so;
}

// Rewrites every "#..." reference inside schema to point below `base` (a JSON pointer).
void rebase_refs(Json& schema, const std::string& base) {
  if (schema.is_object()) {
    for (auto& [key, value] : schema.items()) {
      if (key == "$ref" && value.is_string() && value.get<std::string>().starts_with("#")) {
        value = base + value.get<std::string>().substr(1);
      } else {
        rebase_refs(value, base);
      }
    }
  } else if (schema.is_array()) {
    for (Json& item : schema) rebase_refs(item, base);
  }
}

}  // namespace

void apply_options(const StructuredOutputsParams& options, StructuredOutputsParams& params) {
  params.disable_any_whitespace = params.disable_any_whitespace || options.disable_any_whitespace;
  if (options.whitespace_pattern) params.whitespace_pattern = options.whitespace_pattern;
  if (options.disable_additional_properties) {
    params.disable_additional_properties = options.disable_additional_properties;
  }
}

void check_structured_outputs(const StructuredOutputsParams& params, const std::string& param) {
  if (params.num_constraints() == 0) {
    throw bad_request(
        "'structured_outputs' must set one of json, regex, choice, grammar, json_object and "
        "structural_tag, or come with another structured-output field its options apply to",
        param);
  }
  const bool json_kind = params.json || params.json_object || params.structural_tag;
  if (!json_kind && (params.disable_any_whitespace || params.whitespace_pattern ||
                     params.disable_additional_properties.has_value())) {
    throw bad_request(
        "disable_any_whitespace, whitespace_pattern and disable_additional_properties apply to "
        "JSON output only (json, json_object, structural_tag)",
        param);
  }
  try {
    (void)structured::build_automaton(structured::build_grammar(constraint_of(params)));
  } catch (const InvalidArgument& e) {
    throw bad_request(e.what(), param);
  }
}

std::optional<StructuredField> read_structured_outputs(const Json& body) {
  std::vector<StructuredField> found;
  // structured_outputs with options only (disable_any_whitespace, ...) applies them to the
  // constraint another field sets (response_format, guided_json, tool_choice).
  std::optional<StructuredOutputsParams> options;
  if (const Json* v = find_field(body, "structured_outputs"); v && is_set(*v)) {
    StructuredOutputsParams so = read_structured_object(*v);
    if (so.num_constraints() == 0) {
      options = std::move(so);
    } else {
      found.push_back({std::move(so), "structured_outputs"});
    }
  }
  if (const Json* v = find_field(body, "guided_json"); v && is_set(*v)) {
    StructuredOutputsParams so;
    so.json = schema_text(*v, "guided_json");
    found.push_back({so, "guided_json"});
  }
  if (const Json* v = find_field(body, "guided_regex"); v && is_set(*v)) {
    StructuredOutputsParams so;
    so.regex = string_field(*v, "guided_regex");
    found.push_back({so, "guided_regex"});
  }
  if (const Json* v = find_field(body, "guided_choice"); v && is_set(*v)) {
    StructuredOutputsParams so;
    so.choice = choices(*v, "guided_choice");
    found.push_back({so, "guided_choice"});
  }
  if (const Json* v = find_field(body, "guided_grammar"); v && is_set(*v)) {
    StructuredOutputsParams so;
    so.grammar = string_field(*v, "guided_grammar");
    found.push_back({so, "guided_grammar"});
  }
  if (std::optional<StructuredOutputsParams> so = read_response_format(body)) {
    found.push_back({std::move(*so), "response_format"});
  }
  // vLLM's backend choice: there is one backend here, which every name maps to.
  (void)get_string(body, "guided_decoding_backend", "guided_decoding_backend");
  const std::optional<std::string> ws =
      get_string(body, "guided_whitespace_pattern", "guided_whitespace_pattern");
  if (found.empty()) {
    if (ws && !ws->empty()) {
      throw bad_request("'guided_whitespace_pattern' needs a JSON constraint (guided_json)",
                        "guided_whitespace_pattern");
    }
    if (options) {
      return StructuredField{std::move(*options), "structured_outputs"};  // options only
    }
    return std::nullopt;
  }
  if (found.size() > 1) {
    throw bad_request(fmt::format("only one kind of structured output may be set: '{}' and '{}'",
                                  found[0].param, found[1].param),
                      found[1].param);
  }
  StructuredField out = std::move(found[0]);
  if (ws && !ws->empty()) {
    if (!out.params.json && !out.params.json_object) {
      throw bad_request("'guided_whitespace_pattern' needs a JSON constraint (guided_json)",
                        "guided_whitespace_pattern");
    }
    out.params.whitespace_pattern = *ws;
  }
  if (options) apply_options(*options, out.params);
  check_structured_outputs(out.params, out.param);
  return out;
}

Json forced_tool_schema(const Json& tools, bool required, const std::string& name) {
  const Json empty_object = {{"type", "object"}, {"properties", Json::object()}};
  auto parameters = [&](const Json& tool) {
    const Json& fn = tool.at("function");
    const Json* p = find_field(fn, "parameters");
    return p ? *p : empty_object;
  };
  if (!required) {
    for (const Json& tool : tools) {
      if (tool.at("function").at("name") == name) return parameters(tool);
    }
    throw bad_request(fmt::format("Tool '{}' named in 'tool_choice' is not in 'tools'", name),
                      "tool_choice");
  }
  // Each tool's parameters move under $defs (their references rebased), so that references
  // inside them still resolve in the combined schema.
  Json defs = Json::object();
  Json branches = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string key = fmt::format("tool_{}", i);
    Json params = parameters(tools[i]);
    rebase_refs(params, "#/$defs/" + key);
    defs[key] = std::move(params);
    Json branch = Json::object();
    branch["properties"] = {
        {"name", {{"type", "string"}, {"enum", Json::array({tools[i].at("function").at("name")})}}},
        {"parameters", {{"$ref", "#/$defs/" + key}}}};
    branch["required"] = Json::array({"name", "parameters"});
    branches.push_back(std::move(branch));
  }
  Json schema = Json::object();
  schema["type"] = "array";
  schema["minItems"] = 1;
  schema["items"] = {{"type", "object"}, {"anyOf", std::move(branches)}};
  schema["$defs"] = std::move(defs);
  return schema;
}

}  // namespace pagoda::openai
