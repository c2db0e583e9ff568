// `pagoda tokenize` and `pagoda detokenize`: run a model's tokenizer from the command line, e.g. to
// compare ids with Hugging Face or to feed ids to other tools.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/hub_env.h"
#include "cli/parse_ids.h"
#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {

namespace {

struct TokenizeOptions {
  std::string tokenizer;
  std::string text;
  bool add_special_tokens = false;
  bool jsonl = false;
};

struct DetokenizeOptions {
  std::string tokenizer;
  std::string ids;
  bool skip_special_tokens = false;
};

std::string ids_json(const std::vector<int32_t>& ids) { return nlohmann::json(ids).dump(); }

/// --tokenizer: a file or directory, or a Hub repo id (its tokenizer files, from the cache or
/// downloaded into it).
Tokenizer load_tokenizer(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) return Tokenizer::load(path);
  return Tokenizer::load(resolve_model_argument(path, "", /*weights=*/false,
                                                hub_config_from_env(/*download_dir=*/"")));
}

void run_tokenize(const TokenizeOptions& opts) {
  const Tokenizer tok = load_tokenizer(opts.tokenizer);
  if (!opts.jsonl) {
    std::printf("%s\n", ids_json(tok.encode(opts.text, opts.add_special_tokens)).c_str());
    return;
  }
  std::string line;
  size_t line_number = 0;
  while (std::getline(std::cin, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw InvalidArgument(
          fmt::format("stdin line {}: malformed JSON: {}", line_number, e.what()));
    }
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string()) {
      throw InvalidArgument(
          fmt::format("stdin line {}: expected {{\"text\": string}}", line_number));
    }
    const auto ids = tok.encode(j["text"].get_ref<const std::string&>(), opts.add_special_tokens);
    std::printf("{\"ids\":%s}\n", ids_json(ids).c_str());
  }
}

void run_detokenize(const DetokenizeOptions& opts) {
  const Tokenizer tok = load_tokenizer(opts.tokenizer);
  const std::string text = tok.decode(parse_ids(opts.ids, "--ids"), opts.skip_special_tokens);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
}

}  // namespace

void register_tokenize_commands(CLI::App& app, int& exit_code) {
  auto tokenize_opts = std::make_shared<TokenizeOptions>();
  CLI::App* tokenize = app.add_subcommand("tokenize", "Print the token ids of text as JSON");
  tokenize
      ->add_option("--tokenizer", tokenize_opts->tokenizer,
                   "tokenizer.json, a model directory holding one, or a Hub repo id")
      ->required();
  CLI::Option* text_option =
      tokenize->add_option("--text", tokenize_opts->text, "The text to encode");
  tokenize->add_flag("--add-special-tokens", tokenize_opts->add_special_tokens,
                     "Apply the post-processor (e.g. add BOS)");
  tokenize->add_flag("--jsonl", tokenize_opts->jsonl,
                     "Read {\"text\": ...} lines on stdin and print {\"ids\": [...]} lines");
  tokenize->callback([tokenize_opts, text_option, &exit_code] {
    if (tokenize_opts->jsonl == (text_option->count() > 0)) {
      throw InvalidArgument("tokenize needs exactly one of --text and --jsonl");
    }
    run_tokenize(*tokenize_opts);
    exit_code = 0;
  });

  auto detokenize_opts = std::make_shared<DetokenizeOptions>();
  CLI::App* detokenize = app.add_subcommand("detokenize", "Print the text of token ids");
  detokenize
      ->add_option("--tokenizer", detokenize_opts->tokenizer,
                   "tokenizer.json, a model directory holding one, or a Hub repo id")
      ->required();
  detokenize->add_option("--ids", detokenize_opts->ids, "Comma-separated ids, e.g. 1,2,3")
      ->required();
  detokenize->add_flag("--skip-special-tokens", detokenize_opts->skip_special_tokens,
                       "Leave out special tokens such as BOS and EOS");
  detokenize->callback([detokenize_opts, &exit_code] {
    run_detokenize(*detokenize_opts);
    exit_code = 0;
  });
}

}  // namespace pagoda::cli
