#pragma once
// Reasoning in a model's output (vLLM's --reasoning-parser): the text between <think> and
// </think> goes to message.reasoning_content (streamed: delta.reasoning_content), the rest to
// content. One state machine serves the streamed and the whole answer, so both split alike.
//   deepseek_r1: the output starts inside the reasoning (DeepSeek-R1's template opens <think> in
//     the prompt); a <think> at the very start is dropped; </think> ends it. No </think>: all of
//     it is reasoning.
//   qwen3: the output is content until <think> (Qwen3 writes the tag itself; with
//     enable_thinking=false the template closes an empty block in the prompt and no tag comes),
//     reasoning until </think>, then content.
// Difference from vLLM: vLLM's non-streamed qwen3 answer turns an output with <think> but no
// </think> (cut by max_tokens) into content; its streamed answer, and ours in both forms, give the
// text after <think> as reasoning.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::openai {

/// The names --reasoning-parser takes.
[[nodiscard]] std::vector<std::string> reasoning_parser_names();

/// How one model family marks its reasoning.
struct ReasoningFormat {
  std::string name;
  bool starts_in_reasoning = false;  // deepseek_r1: true; qwen3: false
  std::string start_tag = "<think>";
  std::string end_tag = "</think>";
};

/// The named format; InvalidArgument listing the names for an unknown one.
[[nodiscard]] ReasoningFormat reasoning_format(const std::string& name);

/// One choice's split of its text into reasoning and content, fed in order.
class ReasoningSplitter {
 public:
  explicit ReasoningSplitter(const ReasoningFormat& format);

  struct Delta {
    std::string reasoning;
    std::string content;
  };
  /// Takes the completion's next text; returns what is now certain of each part. A possible
  /// beginning of a tag at the end is held back until the next call or finish().
  [[nodiscard]] Delta add(std::string_view text);
  /// The completion has ended: what was held back.
  [[nodiscard]] Delta finish();
  /// Whether any reasoning was seen (a tag, or deepseek_r1's implicit start).
  [[nodiscard]] bool saw_reasoning() const { return saw_reasoning_; }

 private:
  enum class State { kBeforeStart, kReasoning, kContent };
  const ReasoningFormat* format_;
  State state_;
  bool at_start_ = true;  // nothing released yet (deepseek_r1 drops a leading <think>)
  bool saw_reasoning_ = false;
  std::string pending_;  // text not yet released (a possible tag prefix at its end)
};

}  // namespace pagoda::openai
