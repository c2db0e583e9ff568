#pragma once
// The text the router matches prefixes on, read from an OpenAI request body. Only the order and
// content of the prompt matter: two requests whose prompts begin alike give texts that begin
// alike, which is all prefix_block_hashes needs; the text is never sent anywhere.
#include <string>
#include <string_view>

namespace pagoda::router {

/// The routing text of a POST body:
/// - "prompt" (completions, /tokenize): a string as is; a list of token ids as "id,id,...";
///   a list of prompts, each as above, joined by '\n' (a batch shares the first prompt's prefix);
/// - "messages" (chat, /tokenize): for each message in order, its role, '\n', its content (a
///   string, or the "text" of each text part with other parts as their JSON), '\n';
/// - "input" (embeddings): as "prompt".
/// A body that is not a JSON object, or has none of these, gives "" (routed by load alone; the
/// backend judges the request).
[[nodiscard]] std::string routing_text(std::string_view body);

}  // namespace pagoda::router
