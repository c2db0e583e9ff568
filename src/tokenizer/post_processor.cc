#include "tokenizer/post_processor.h"

#include "core/status.h"

namespace pagoda {

namespace tj = tokenizer_json;

namespace {

PostProcessor template_processing(const tj::Json& j, const std::string& file) {
  const tj::Json& single = tj::require(j, "single", file, "TemplateProcessing");
  if (!single.is_array()) tj::fail(file, "TemplateProcessing.single must be an array");
  const auto specials_it = j.find("special_tokens");
  PostProcessor p;
  bool seen_sequence = false;
  for (const auto& item : single) {
    if (item.contains("Sequence")) {
      if (seen_sequence) tj::fail(file, "TemplateProcessing.single has two sequences");
      seen_sequence = true;
      continue;
    }
    const tj::Json& special = tj::require(item, "SpecialToken", file, "TemplateProcessing.single");
    const std::string name = tj::get_string(special, "id", file, "SpecialToken");
    if (specials_it == j.end() || !specials_it->contains(name)) {
      tj::fail(file, "TemplateProcessing.special_tokens has no entry '" + name + "'");
    }
    const tj::Json& ids = tj::require((*specials_it)[name], "ids", file, "special_tokens." + name);
    for (const auto& id : ids) {
      if (!id.is_number_integer()) tj::fail(file, "special_tokens." + name + ".ids must be ints");
      (seen_sequence ? p.suffix : p.prefix).push_back(id.get<int32_t>());
    }
  }
  return p;
}

// BertProcessing / RobertaProcessing: [cls] A [sep], each given as ["token", id].
PostProcessor cls_sep_processing(const tj::Json& j, const std::string& file,
                                 const std::string& type) {
  auto id_of = [&](const char* key) {
    const tj::Json& pair = tj::require(j, key, file, type);
    if (!pair.is_array() || pair.size() != 2 || !pair[1].is_number_integer()) {
      tj::fail(file, type + "." + key + " must be [token, id]");
    }
    return pair[1].get<int32_t>();
  };
  return PostProcessor{{id_of("cls")}, {id_of("sep")}};
}

}  // namespace

void PostProcessor::apply(std::vector<int32_t>& ids) const {
  ids.insert(ids.begin(), prefix.begin(), prefix.end());
  ids.insert(ids.end(), suffix.begin(), suffix.end());
}

PostProcessor make_post_processor(const tj::Json& j, const std::string& file) {
  if (j.is_null()) return {};
  const std::string type = tj::component_type(j, file, "post_processor");
  if (type == "TemplateProcessing") return template_processing(j, file);
  if (type == "ByteLevel") return {};  // only adjusts offsets, which we do not produce
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    return cls_sep_processing(j, file, type);
  }
  if (type == "Sequence") {
    const tj::Json& list = tj::require(j, "processors", file, "Sequence post_processor");
    if (!list.is_array()) tj::fail(file, "Sequence post_processor 'processors' must be an array");
    PostProcessor combined;
    for (const auto& item : list) {  // each later step wraps the result of the earlier ones
      PostProcessor step = make_post_processor(item, file);
      step.prefix.insert(step.prefix.end(), combined.prefix.begin(), combined.prefix.end());
      combined.suffix.insert(combined.suffix.end(), step.suffix.begin(), step.suffix.end());
      combined.prefix = std::move(step.prefix);
    }
    return combined;
  }
  tj::fail(file, "unsupported post_processor type '" + type + "'");
}

}  // namespace pagoda
