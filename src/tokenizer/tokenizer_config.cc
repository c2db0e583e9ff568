#include "tokenizer/tokenizer_config.h"

#include <filesystem>

#include "core/mapped_file.h"
#include "core/status.h"
#include "tokenizer/json_util.h"

namespace pagoda {

namespace tj = tokenizer_json;

namespace {

std::optional<tj::Json> read_json_if_present(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  const std::string text = read_text_file(path.string());
  try {
    return tj::Json::parse(text);
  } catch (const tj::Json::exception& e) {
    tj::fail(path.string(), std::string("malformed JSON: ") + e.what());
  }
}

// A token field is either "text" or {"content": "text", ...} (AddedToken serialisation).
std::optional<std::string> token_field(const tj::Json& j, const char* key,
                                       const std::string& file) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  tj::fail(file, std::string(key) + " must be a string or an object with 'content'");
}

std::optional<bool> bool_field(const tj::Json& j, const char* key, const std::string& file) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) tj::fail(file, std::string(key) + " must be a boolean");
  return it->get<bool>();
}

std::string chat_template_field(const tj::Json& j, const std::string& file) {
  const auto it = j.find("chat_template");
  if (it == j.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const auto& entry : *it) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        return entry["template"].get<std::string>();
      }
    }
    return "";
  }
  tj::fail(file, "chat_template must be a string or a list of {name, template}");
}

}  // namespace

TokenizerConfig load_tokenizer_config(const std::string& dir) {
  const std::filesystem::path base(dir);
  TokenizerConfig config;
  const auto config_path = base / "tokenizer_config.json";
  if (const auto j = read_json_if_present(config_path)) {
    const std::string file = config_path.string();
    if (!j->is_object()) tj::fail(file, "must hold a JSON object");
    config.bos_token = token_field(*j, "bos_token", file);
    config.eos_token = token_field(*j, "eos_token", file);
    config.add_bos_token = bool_field(*j, "add_bos_token", file);
    config.add_eos_token = bool_field(*j, "add_eos_token", file);
    config.chat_template = chat_template_field(*j, file);
  }
  // Newer transformers save the template as its own file, which then takes precedence.
  std::error_code ec;
  if (const auto jinja = base / "chat_template.jinja";
      std::filesystem::is_regular_file(jinja, ec)) {
    config.chat_template = read_text_file(jinja.string());
  }
  const auto generation_path = base / "generation_config.json";
  if (const auto j = read_json_if_present(generation_path)) {
    const auto it = j->find("eos_token_id");
    if (it != j->end() && it->is_number_integer()) {
      config.generation_eos_ids.push_back(it->get<int32_t>());
    } else if (it != j->end() && it->is_array()) {
      for (const auto& id : *it) {
        if (!id.is_number_integer())
          tj::fail(generation_path.string(), "eos_token_id must be ints");
        config.generation_eos_ids.push_back(id.get<int32_t>());
      }
    }
  }
  return config;
}

}  // namespace pagoda
