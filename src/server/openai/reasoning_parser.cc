#include "server/openai/reasoning_parser.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/status.h"

namespace pagoda::openai {
namespace {

/// Length of the longest suffix of `text` that is a proper prefix of `tag`.
size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

std::vector<std::string> reasoning_parser_names() { return {"deepseek_r1", "qwen3"}; }

ReasoningFormat reasoning_format(const std::string& name) {
  ReasoningFormat f;
  f.name = name;
  if (name == "deepseek_r1") {
    f.starts_in_reasoning = true;
  } else if (name != "qwen3") {
    throw InvalidArgument(fmt::format("unknown reasoning parser '{}' (known: {})", name,
                                      fmt::join(reasoning_parser_names(), ", ")));
  }
  return f;
}

ReasoningSplitter::ReasoningSplitter(const ReasoningFormat& format)
    : format_(&format),
      state_(format.starts_in_reasoning ? State::kReasoning : State::kBeforeStart),
      saw_reasoning_(format.starts_in_reasoning) {}

ReasoningSplitter::Delta ReasoningSplitter::add(std::string_view text) {
  pending_ += text;
  Delta out;
  for (;;) {
    if (state_ == State::kContent) {
      out.content += pending_;
      pending_.clear();
      break;
    }
    // deepseek_r1 drops a <think> that opens the output; qwen3 waits for one.
    const bool drop_leading = state_ == State::kReasoning && at_start_;
    const std::string& tag =
        state_ == State::kBeforeStart || drop_leading ? format_->start_tag : format_->end_tag;
    const size_t at = pending_.find(tag);
    if (drop_leading) {
      if (at == 0) {
        pending_.erase(0, tag.size());
        at_start_ = false;
        continue;
      }
      if (pending_.size() < tag.size() && tag.starts_with(pending_)) break;  // maybe <think>
      at_start_ = false;
      continue;
    }
    std::string& sink = state_ == State::kBeforeStart ? out.content : out.reasoning;
    if (at == std::string::npos) {
      const size_t keep = partial_tag_suffix(pending_, tag);
      sink.append(pending_, 0, pending_.size() - keep);
      pending_.erase(0, pending_.size() - keep);
      if (!sink.empty()) at_start_ = false;
      break;
    }
    sink.append(pending_, 0, at);
    pending_.erase(0, at + tag.size());
    at_start_ = false;
    if (state_ == State::kBeforeStart) {
      state_ = State::kReasoning;
      saw_reasoning_ = true;
    } else {
      state_ = State::kContent;
    }
  }
  return out;
}

ReasoningSplitter::Delta ReasoningSplitter::finish() {
  Delta out;
  if (state_ == State::kReasoning) {
    out.reasoning = std::move(pending_);
  } else {
    out.content = std::move(pending_);
  }
  pending_.clear();
  return out;
}

}  // namespace pagoda::openai
