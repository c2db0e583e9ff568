#include "server/openai/response_common.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <span>

#include "tokenizer/utf8.h"

namespace pagoda::openai {

Json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  Json usage = Json::object();
  usage["prompt_tokens"] = prompt_tokens;
  usage["total_tokens"] = prompt_tokens + completion_tokens;
  usage["completion_tokens"] = completion_tokens;
  if (cached_tokens > 0) usage["prompt_tokens_details"] = {{"cached_tokens", cached_tokens}};
  return usage;
}

Json stop_reason_json(const RequestOutput& out, const SamplingParams& params) {
  if (out.stop_reason.empty()) return nullptr;
  const auto& stop = params.stop;
  if (std::find(stop.begin(), stop.end(), out.stop_reason) != stop.end()) return out.stop_reason;
  for (int32_t id : params.stop_token_ids) {
    if (std::to_string(id) == out.stop_reason) return id;
  }
  return out.stop_reason;
}

Json finish_reason_json(const RequestOutput& out) {
  if (!out.finish_reason) return nullptr;
  return to_string(*out.finish_reason);
}

std::string stop_string_suffix(const RequestOutput& out, const SamplingParams& params,
                               bool include) {
  if (!include || out.finish_reason != FinishReason::kStop || out.stop_reason.empty()) return {};
  const auto& stop = params.stop;
  return std::find(stop.begin(), stop.end(), out.stop_reason) != stop.end() ? out.stop_reason
                                                                            : std::string();
}

TokenText token_text(const Tokenizer* tokenizer, int32_t id) {
  TokenText t;
  if (tokenizer && id >= 0 && id < tokenizer->vocab_size()) {
    // Decoded after an ordinary anchor token, minus the anchor's text: a token decoded alone
    // loses the leading space of a sentencepiece "▁" (the Strip decoder), so that the tokens of a
    // completion would no longer join into its text, as OpenAI's and vLLM's do.
    const std::optional<int32_t> anchor = tokenizer->token_to_id("a");
    if (anchor && *anchor != id) {
      const int32_t pair[] = {*anchor, id};
      const int32_t alone[] = {*anchor};
      const std::string with = tokenizer->decode(pair, /*skip_special_tokens=*/false);
      const std::string base = tokenizer->decode(alone, /*skip_special_tokens=*/false);
      t.bytes = with.starts_with(base) ? with.substr(base.size())
                                       : tokenizer->decode(std::span(pair + 1, 1), false);
    } else {
      const int32_t ids[] = {id};
      t.bytes = tokenizer->decode(ids, /*skip_special_tokens=*/false);
    }
  } else {
    t.bytes = "token_id:" + std::to_string(id);
  }
  t.text = utf8::is_valid(t.bytes) ? t.bytes : utf8::to_valid_lossy(t.bytes);
  return t;
}

TokenText token_text(const Tokenizer* tokenizer, int32_t id, bool as_id) {
  if (!as_id) return token_text(tokenizer, id);
  TokenText t;
  t.bytes = "token_id:" + std::to_string(id);
  t.text = t.bytes;
  return t;
}

Json prompt_logprobs_json(const std::vector<std::optional<TokenLogprobs>>& logprobs,
                          const Tokenizer* tokenizer, bool as_id) {
  if (logprobs.empty()) return nullptr;
  Json out = Json::array();
  for (const std::optional<TokenLogprobs>& lp : logprobs) {
    if (!lp) {
      out.push_back(nullptr);
      continue;
    }
    Json entry = Json::object();
    auto add = [&](int32_t id, float logprob, int32_t rank) {
      const std::string key = std::to_string(id);
      if (entry.contains(key)) return;
      Json item = Json::object();
      item["logprob"] = json_logprob(logprob);
      item["rank"] = rank > 0 ? Json(rank) : Json();
      item["decoded_token"] = token_text(tokenizer, id, as_id).text;
      entry[key] = std::move(item);
    };
    add(lp->token, lp->logprob, lp->rank);
    for (size_t i = 0; i < lp->top.size(); ++i) {
      add(lp->top[i].first, lp->top[i].second, static_cast<int32_t>(i + 1));
    }
    out.push_back(std::move(entry));
  }
  return out;
}

Json token_ids_json(const std::vector<int32_t>& ids) {
  Json list = Json::array();
  for (int32_t id : ids) list.push_back(id);
  return list;
}

double json_logprob(float logprob) {
  if (std::isnan(logprob)) return -9999.0;
  return std::max(static_cast<double>(logprob), -9999.0);
}

int64_t text_length(const std::string& text) {
  int64_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace pagoda::openai
