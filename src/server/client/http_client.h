#pragma once
// The HTTP side of `pagoda bench serve`: plain requests (/metrics, /v1/models) and a load
// generator that streams many OpenAI requests at once and times every chunk.
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::client {

/// Where the server is: http://host:port[/prefix], the prefix prepended to every path.
struct Endpoint {
  std::string host;
  std::string port;
  std::string base_path;  // "" or "/something", never a trailing '/'
};

/// Parses an http:// base URL (https is not supported). Throws InvalidArgument.
[[nodiscard]] Endpoint parse_base_url(std::string_view url);

struct HttpResponse {
  int status = 0;
  std::string body;
};

/// One blocking GET (or POST when `body` is not empty). Throws on connection errors and timeouts.
[[nodiscard]] HttpResponse http_request(const Endpoint& endpoint, std::string_view path,
                                        const std::string& api_key, std::string_view body = {},
                                        double timeout_s = 30);

/// A streaming request of the load: the path and its JSON body (which must set "stream": true).
struct StreamRequest {
  std::string path;
  std::string body;
};

/// What the client saw of one streamed request; times in seconds, as vLLM's benchmark measures:
/// ttft to the first chunk that carries text, itl between later text chunks, latency to the last
/// chunk.
struct StreamResult {
  bool success = false;
  std::string error;
  double start_time = 0;  // since the load began
  double ttft = 0;
  std::vector<double> itl;
  double latency = 0;
  int64_t prompt_tokens = -1;  // from the final usage chunk; -1 when the server sent none
  int64_t output_tokens = -1;
  std::string generated_text;
};

struct LoadOptions {
  double request_rate = std::numeric_limits<double>::infinity();  // requests/s; inf: all at once
  double burstiness = 1.0;  // gamma shape of the inter-arrival times; 1 is a Poisson process
  int max_concurrency = 0;  // 0: unbounded
  uint64_t seed = 0;
  std::string api_key;
  int num_threads = 1;                               // io threads that read the streams
  double timeout_s = 3600;                           // the longest silence on one connection
  std::function<void(size_t num_done)> on_progress;  // called on io threads
};

struct LoadResult {
  std::vector<StreamResult> results;  // in the order of the requests
  double duration_s = 0;
};

/// Sends the requests at the configured rate and concurrency, each on its own connection, reads
/// their server-sent events as they arrive and returns when every request has ended.
[[nodiscard]] LoadResult run_streaming_load(const Endpoint& endpoint,
                                            const std::vector<StreamRequest>& requests,
                                            const LoadOptions& options);

/// Applies the data of one event of an OpenAI stream (completion or chat) to `result`: its text,
/// usage and timing. `now` is in the clock of start_time; `last_chunk_time` carries the time of
/// the previous chunk with choices between calls (start it at 0). Returns false, with
/// result.error set, for an error event or a chunk that is not JSON; true otherwise.
bool apply_stream_chunk(std::string_view data, double now, StreamResult& result,
                        double& last_chunk_time);

}  // namespace pagoda::client
