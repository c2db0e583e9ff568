#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

#include "core/status.h"

namespace pagoda {

namespace {

// Per-thread match state: match data and a JIT stack large enough for long runs of whitespace
// or letters. Thread-local so that concurrent encodes never share them and never reallocate.
struct MatchState {
  MatchState()
      : data(pcre2_match_data_create(1, nullptr)),
        stack(pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr)),
        context(pcre2_match_context_create(nullptr)) {
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
  pcre2_match_data* data;
  pcre2_jit_stack* stack;
  pcre2_match_context* context;
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& context) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw InvalidArgument(fmt::format("{}: bad regex at offset {}: {}", context, offset,
                                      reinterpret_cast<const char*>(message)));
  }
  // JIT is an optimisation: if the platform lacks it, the interpreter gives the same matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const {
  auto* code = static_cast<pcre2_code*>(code_);
  MatchState& state = match_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, state.data,
                               state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    PAGODA_CHECK(rc >= 0, "pcre2_match failed with code {}", rc);
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end > begin) matches.emplace_back(begin, end);
    if (end > start) {
      start = end;
    } else {  // empty match: step over one character so the scan always progresses
      if (start >= text.size()) break;
      start += 1;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) {
        ++start;
      }
    }
  }
}

}  // namespace pagoda
