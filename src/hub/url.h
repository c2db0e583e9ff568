#pragma once
// URLs as the Hub client needs them: parse an http(s) address, resolve a redirect's Location
// against the address that answered it, and percent-encode path segments.
#include <string>
#include <string_view>

namespace pagoda::hub {

/// An absolute http:// or https:// URL, split for a connection and its request line.
struct Url {
  std::string scheme;  // "http" or "https"
  std::string host;    // without brackets for an IPv6 literal
  std::string port;    // always set: the scheme's default when the URL has none
  std::string target;  // path and query, starting with '/'

  /// scheme://host[:port], the port only when it is not the scheme's default.
  [[nodiscard]] std::string origin() const;
  /// origin() + target.
  [[nodiscard]] std::string str() const;
  /// The Host header's value: host[:port] as origin() writes it.
  [[nodiscard]] std::string host_header() const;
};

/// Parses an absolute http(s) URL; throws InvalidArgument naming `what` (e.g. "HF_ENDPOINT").
[[nodiscard]] Url parse_url(std::string_view text, std::string_view what = "URL");

/// The URL a Location header points at, as a browser resolves it against `base`: absolute,
/// scheme-relative (//host/path), absolute-path (/path) or relative to base's directory.
[[nodiscard]] Url resolve_location(const Url& base, std::string_view location);

/// Percent-encodes every byte outside RFC 3986's unreserved set; '/' too unless `keep_slash`.
[[nodiscard]] std::string percent_encode(std::string_view text, bool keep_slash);

}  // namespace pagoda::hub
