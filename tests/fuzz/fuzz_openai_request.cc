// libFuzzer target: the input is a request body, fed to every body parser of the OpenAI layer
// and, when a body is accepted, through the response builders. The only exception allowed out of
// the parsers is ApiException (a 4xx for the client); anything else, a crash, a leak or undefined
// behaviour is a bug. Run by tools/run_fuzzers.sh.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/openai/api_error.h"
#include "server/openai/chat_request.h"
#include "server/openai/chat_response.h"
#include "server/openai/completion_request.h"
#include "server/openai/completion_response.h"
#include "server/openai/endpoints.h"
#include "server/openai/sse.h"

namespace {

using namespace pagoda;
using namespace pagoda::openai;

struct Fixture {
  Tokenizer tokenizer = Tokenizer::load(PAGODA_SOURCE_DIR "/models/stories260K");
  tmpl::ChatTemplate chat_template{tmpl::kDefaultChatTemplate};
  ServerContext ctx;

  Fixture() {
    ctx.served_model_names = {"stories260K"};
    ctx.max_model_len = 512;
    ctx.vocab_size = tokenizer.vocab_size();
    ctx.tokenizer = &tokenizer;
    ctx.chat_template = &chat_template;
    // Keep each input fast: a request's template may loop; the server's limits are larger.
    ctx.render_limits.max_loop_iterations = 10'000;
    ctx.render_limits.max_output_bytes = size_t{1} << 20;
  }
};

const Fixture& fixture() {
  static const Fixture f;
  return f;
}

// One final update per completion, as the engine would send it (logprobs are used only when
// the request asked for them).
RequestOutput fake_output(int index) {
  RequestOutput out;
  out.index = index;
  out.token_ids = {3, 200};
  out.text = "ab\xE2";  // a partial character must not break the JSON
  out.finish_reason = FinishReason::kStop;
  out.stop_reason = "13";
  out.num_prompt_tokens = 4;
  for (int32_t id : out.token_ids) out.logprobs.push_back({id, -0.5f, {{id, -0.5f}, {7, -1.0f}}});
  return out;
}

void exercise_completion(std::string_view body, const Fixture& f) {
  const CompletionRequest r = parse_completion_request(body, f.ctx);
  CompletionResponseBuilder stream(r, &f.tokenizer);
  CompletionResponseBuilder whole(r, &f.tokenizer);
  for (size_t p = 0; p < r.engine_requests.size() && p < 4; ++p) {
    for (int i = 0; i < r.n && i < 4; ++i) {
      for (const Json& chunk : stream.stream_chunks(p, fake_output(i))) {
        (void)sse_event(chunk);
      }
      whole.add(p, fake_output(i));
    }
  }
  (void)sse_event(stream.usage_chunk());
  (void)json_body(whole.response());
}

void exercise_chat(std::string_view body, const Fixture& f) {
  const ChatRequest r = parse_chat_request(body, f.ctx);
  ChatResponseBuilder stream(r, &f.tokenizer);
  ChatResponseBuilder whole(r, &f.tokenizer);
  for (const Json& chunk : stream.start_chunks()) (void)sse_event(chunk);
  for (int i = 0; i < r.n && i < 4; ++i) {
    for (const Json& chunk : stream.stream_chunks(fake_output(i))) {
      (void)sse_event(chunk);
    }
    whole.add(fake_output(i));
  }
  (void)json_body(whole.response());
}

template <typename Fn>
void expect_only_api_errors(Fn&& fn) {
  try {
    fn();
  } catch (const ApiException& e) {
    (void)error_body(e.error());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Fixture& f = fixture();
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  expect_only_api_errors([&] { exercise_completion(body, f); });
  expect_only_api_errors([&] { exercise_chat(body, f); });
  expect_only_api_errors([&] { (void)json_body(tokenize_response(body, f.ctx)); });
  expect_only_api_errors([&] { (void)json_body(detokenize_response(body, f.ctx)); });
  return 0;
}
