// A tiny blocking HTTP/1.1 client for instance metadata endpoints: plain http on a link-local or
// loopback IPv4 address, one request per connection (`Connection: close`), a body of a few bytes.
// No libcurl: nothing here needs TLS, redirects or proxies, and a metadata endpoint must never go
// through a proxy anyway. Every call has a deadline and can be cancelled from another thread
// through `cancel_fd` (readable = give up now), so whoever waits on it is never held up.
// Not for the event loop: call it from a thread of its own.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "spendcap/base/duration.hpp"

namespace spendcap {

struct HttpUrl {
  std::string host;  // an IPv4 address or a name (resolved with getaddrinfo, IPv4 only)
  int port = 80;
  std::string path = "/";
};

// "http://169.254.169.254/latest" -> {169.254.169.254, 80, "/latest"}. Throws Error naming
// `what` (the flag) when the text is not a plain http:// URL.
HttpUrl parse_http_url(const std::string& text, const std::string& what);

struct HttpResponse {
  int status = 0;
  std::string body;
};

struct MetadataRequest {
  std::string method = "GET";
  HttpUrl url;
  std::map<std::string, std::string> headers;
};

// The response, or nullopt with `error` set when there was none before `timeout` (refused,
// unreachable, cancelled, malformed).
std::optional<HttpResponse> http_request(const MetadataRequest& request, Nanos timeout,
                                         int cancel_fd, std::string& error);

}  // namespace spendcap
