#include "hub/url.h"

#include <fmt/format.h>

#include "core/status.h"

namespace pagoda::hub {
namespace {

std::string default_port(std::string_view scheme) { return scheme == "https" ? "443" : "80"; }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

/// Drops "." and ".." segments from an absolute path (RFC 3986, 5.2.4), keeping the query.
std::string normalize_path(std::string_view target) {
  const size_t q = target.find_first_of("?#");
  const std::string_view path = target.substr(0, q);
  std::string_view rest = q == std::string_view::npos ? std::string_view{} : target.substr(q);
  if (!rest.empty() && rest.front() == '#') rest = {};
  if (const size_t hash = rest.find('#'); hash != std::string_view::npos)
    rest = rest.substr(0, hash);
  std::string out;
  size_t i = 0;
  while (i < path.size()) {
    size_t next = path.find('/', i + 1);
    if (next == std::string_view::npos) next = path.size();
    const std::string_view segment = path.substr(i, next - i);  // "/name"
    if (segment == "/..") {
      const size_t cut = out.rfind('/');
      out.resize(cut == std::string::npos ? 0 : cut);
      if (next == path.size()) out += '/';
    } else if (segment == "/.") {
      if (next == path.size()) out += '/';
    } else {
      out += segment;
    }
    i = next;
  }
  if (out.empty()) out.push_back('/');
  return out + std::string(rest);
}

}  // namespace

std::string Url::origin() const {
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return port == default_port(scheme) ? fmt::format("{}://{}", scheme, h)
                                      : fmt::format("{}://{}:{}", scheme, h, port);
}

std::string Url::str() const { return origin() + target; }

std::string Url::host_header() const {
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return port == default_port(scheme) ? h : h + ":" + port;
}

Url parse_url(std::string_view text, std::string_view what) {
  const auto bad = [&](std::string_view why) {
    return InvalidArgument(fmt::format("{} '{}': {}", what, text, why));
  };
  const size_t colon = text.find("://");
  if (colon == std::string_view::npos) throw bad("not an absolute http:// or https:// URL");
  Url url;
  url.scheme = lower(text.substr(0, colon));
  if (url.scheme != "http" && url.scheme != "https") throw bad("the scheme must be http or https");
  std::string_view rest = text.substr(colon + 3);
  const size_t slash = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, slash);
  url.target = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  if (url.target.front() != '/') url.target.insert(url.target.begin(), '/');
  if (authority.find('@') != std::string_view::npos) throw bad("user information is not supported");
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) throw bad("unclosed '[' in the host");
    url.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') throw bad("junk after the IPv6 address");
      port = after.substr(1);
    }
  } else {
    const size_t c = authority.rfind(':');
    url.host = lower(authority.substr(0, c));
    if (c != std::string_view::npos) port = authority.substr(c + 1);
  }
  if (url.host.empty()) throw bad("no host");
  if (!port.empty()) {
    for (char c : port) {
      if (c < '0' || c > '9') throw bad("the port is not a number");
    }
    if (port.size() > 5 || std::stoi(std::string(port)) > 65535) throw bad("port out of range");
  }
  url.port = port.empty() ? default_port(url.scheme) : std::string(port);
  url.target = normalize_path(url.target);
  return url;
}

Url resolve_location(const Url& base, std::string_view location) {
  if (location.find("://") != std::string_view::npos &&
      location.find("://") < location.find_first_of("/?#")) {
    return parse_url(location, "redirect Location");
  }
  if (location.starts_with("//")) {
    return parse_url(base.scheme + ":" + std::string(location), "redirect Location");
  }
  Url url = base;
  if (location.empty()) return url;
  if (location.front() == '/') {
    url.target = normalize_path(location);
  } else if (location.front() == '?') {
    url.target = base.target.substr(0, base.target.find('?')) + std::string(location);
  } else {
    const std::string path = base.target.substr(0, base.target.find('?'));
    url.target = normalize_path(path.substr(0, path.rfind('/') + 1) + std::string(location));
  }
  return url;
}

std::string percent_encode(std::string_view text, bool keep_slash) {
  std::string out;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
                            c == '~' || (keep_slash && c == '/');
    if (unreserved) {
      out += ch;
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

}  // namespace pagoda::hub
