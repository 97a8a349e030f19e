#include "spendcap/integrations/http_get.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "spendcap/base/error.hpp"

namespace spendcap {

namespace {

// A metadata answer is a few bytes; anything past this is not one.
constexpr size_t kMaxResponseBytes = 64 * 1024;

class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

// Waits until `fd` is ready for `events`, the deadline passes ("timed out") or `cancel_fd` becomes
// readable ("cancelled"). Returns "" when ready.
std::string wait_for(int fd, short events, TimePoint deadline, int cancel_fd) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now()).count();
    if (left <= 0) return "timed out";
    pollfd fds[2] = {{fd, events, 0}, {cancel_fd, POLLIN, 0}};
    int n = ::poll(fds, cancel_fd >= 0 ? 2 : 1, static_cast<int>(left));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_text(errno);
    }
    if (cancel_fd >= 0 && (fds[1].revents & POLLIN)) return "cancelled";
    if (n > 0) return "";
  }
}

std::optional<sockaddr_in> resolve(const HttpUrl& url, std::string& error) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(url.port));
  if (::inet_pton(AF_INET, url.host.c_str(), &address.sin_addr) == 1) return address;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(url.host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || !found) {
    error = "cannot resolve " + url.host + ": " + ::gai_strerror(rc);
    return std::nullopt;
  }
  address.sin_addr = reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr;
  ::freeaddrinfo(found);
  return address;
}

std::optional<HttpResponse> parse_response(const std::string& raw, std::string& error) {
  size_t head_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || head_end == std::string::npos || raw.size() < 12) {
    error = "not an HTTP response";
    return std::nullopt;
  }
  HttpResponse response;
  auto [end, ec] = std::from_chars(raw.data() + 9, raw.data() + 12, response.status);
  if (ec != std::errc{} || end != raw.data() + 12) {
    error = "no status code in the response";
    return std::nullopt;
  }
  std::string head = raw.substr(0, head_end);
  for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (head.find("transfer-encoding: chunked") != std::string::npos) {
    error = "chunked responses are not supported";  // HTTP/1.0-style bodies only: we ask for one
    return std::nullopt;
  }
  response.body = raw.substr(head_end + 4);
  return response;
}

}  // namespace

HttpUrl parse_http_url(const std::string& text, const std::string& what) {
  const std::string scheme = "http://";
  if (text.rfind(scheme, 0) != 0) {
    throw Error(what + " " + text, "not an http:// URL",
                "metadata endpoints are plain http, e.g. http://169.254.169.254");
  }
  std::string rest = text.substr(scheme.size());
  size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  HttpUrl url;
  url.path = slash == std::string::npos ? "/" : rest.substr(slash);
  size_t colon = authority.rfind(':');
  url.host = authority.substr(0, colon);
  if (colon != std::string::npos) {
    std::string port = authority.substr(colon + 1);
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), url.port);
    if (ec != std::errc{} || end != port.data() + port.size() || url.port < 1 || url.port > 65535) {
      throw Error(what + " " + text, "bad port", "write it like http://127.0.0.1:8080");
    }
  }
  if (url.host.empty() || url.host.find('@') != std::string::npos) {
    throw Error(what + " " + text, "no host", "write it like http://169.254.169.254");
  }
  for (char c : url.path) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) {
      throw Error(what + " " + text, "spaces or control characters in the path");
    }
  }
  return url;
}

std::optional<HttpResponse> http_request(const MetadataRequest& request, Nanos timeout,
                                         int cancel_fd, std::string& error) {
  TimePoint deadline = now() + timeout;
  auto address = resolve(request.url, error);
  if (!address) return std::nullopt;
  Socket socket(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (socket.fd() < 0) {
    error = "socket: " + errno_text(errno);
    return std::nullopt;
  }
  if (::connect(socket.fd(), reinterpret_cast<const sockaddr*>(&*address), sizeof(*address)) < 0) {
    if (errno != EINPROGRESS) {
      error = "connect: " + errno_text(errno);
      return std::nullopt;
    }
    if (std::string why = wait_for(socket.fd(), POLLOUT, deadline, cancel_fd); !why.empty()) {
      error = "connect: " + why;
      return std::nullopt;
    }
    int so_error = 0;
    socklen_t length = sizeof(so_error);
    ::getsockopt(socket.fd(), SOL_SOCKET, SO_ERROR, &so_error, &length);
    if (so_error != 0) {
      error = "connect: " + errno_text(so_error);
      return std::nullopt;
    }
  }

  // HTTP/1.0 semantics in an HTTP/1.1 request: Connection: close, so the body ends at EOF.
  std::string text = request.method + " " + request.url.path +
                     " HTTP/1.1\r\nHost: " + request.url.host +
                     "\r\nConnection: close\r\nContent-Length: 0\r\n";
  for (const auto& [name, value] : request.headers) text += name + ": " + value + "\r\n";
  text += "\r\n";
  size_t sent = 0;
  while (sent < text.size()) {
    ssize_t n = ::send(socket.fd(), text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EAGAIN) {
      if (std::string why = wait_for(socket.fd(), POLLOUT, deadline, cancel_fd); !why.empty()) {
        error = "send: " + why;
        return std::nullopt;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = "send: " + errno_text(errno);
      return std::nullopt;
    }
    sent += static_cast<size_t>(n);
  }

  std::string raw;
  char buffer[4096];
  for (;;) {
    if (std::string why = wait_for(socket.fd(), POLLIN, deadline, cancel_fd); !why.empty()) {
      error = "read: " + why;
      return std::nullopt;
    }
    ssize_t n = ::recv(socket.fd(), buffer, sizeof(buffer), 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n < 0) {
      error = "read: " + errno_text(errno);
      return std::nullopt;
    }
    if (n == 0) break;
    raw.append(buffer, static_cast<size_t>(n));
    if (raw.size() > kMaxResponseBytes) {
      error = "response over " + std::to_string(kMaxResponseBytes) + " bytes";
      return std::nullopt;
    }
  }
  return parse_response(raw, error);
}

}  // namespace spendcap
