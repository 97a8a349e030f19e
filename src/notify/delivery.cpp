#include "spendcap/notify/delivery.hpp"

#include <sys/time.h>

#include <algorithm>
#include <cctype>
#include <thread>

#include "spendcap/base/error.hpp"
#include "spendcap/base/sha256.hpp"
#include "spendcap/notify/standard_webhooks.hpp"

namespace spendcap {

namespace {

// A little room for an attempt to start: below this a retry is not worth beginning.
constexpr Nanos kMinAttempt = std::chrono::milliseconds(200);
constexpr Nanos kConnectTimeout = std::chrono::seconds(3);

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// The parts of an URL: scheme "://" userinfo "@" host path "?" query.
struct UrlParts {
  std::string scheme, userinfo, host, path, query;
};

std::optional<UrlParts> split_url(const std::string& url) {
  size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return std::nullopt;
  UrlParts parts;
  parts.scheme = url.substr(0, scheme_end);
  std::string rest = url.substr(scheme_end + 3);
  size_t path_at = rest.find_first_of("/?#");
  std::string authority = rest.substr(0, path_at);
  std::string tail = path_at == std::string::npos ? "" : rest.substr(path_at);
  size_t at = authority.rfind('@');
  if (at != std::string::npos) {
    parts.userinfo = authority.substr(0, at);
    authority = authority.substr(at + 1);
  }
  parts.host = authority;
  size_t query_at = tail.find_first_of("?#");
  parts.path = tail.substr(0, query_at);
  if (query_at != std::string::npos) parts.query = tail.substr(query_at + 1);
  return parts;
}

// Slack's and Mattermost's incoming webhooks carry their credential in the path.
bool path_is_secret(const UrlParts& parts) {
  std::string host = lower(parts.host);
  return host.find("slack.com") != std::string::npos ||
         parts.path.find("/hooks/") != std::string::npos ||
         parts.path.find("/services/") != std::string::npos;
}

double wall_now() {
  timeval tv{};
  ::gettimeofday(&tv, nullptr);
  return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6;
}

}  // namespace

// ---- targets ----

std::string WebhookTarget::display() const {
  if (destination.rfind("env:", 0) == 0) return "$" + destination.substr(4);
  if (destination.rfind("file:", 0) == 0) return destination;
  return redact_url(url);
}

bool WebhookTarget::wants(const std::string& event) const {
  return std::find(events.begin(), events.end(), event) != events.end();
}

void require_http_url(const std::string& url, const std::string& what) {
  auto parts = split_url(url);
  std::string scheme = parts ? lower(parts->scheme) : "";
  if (!parts || (scheme != "http" && scheme != "https") || parts->host.empty()) {
    throw Error(what,
                "not an http:// or https:// URL" + (parts ? " (" + redact_url(url) + ")" : ""),
                "give the endpoint's http(s) URL");
  }
}

void require_signing_key(const std::string& secret, const std::string& what) {
  if (standard_webhooks_key(secret)) return;
  throw Error(what, "the signing secret starts with \"whsec_\" but the rest is not base64",
              "give a whsec_ secret as Standard Webhooks writes it (whsec_ + base64 of 24 to 64 "
              "random bytes), or a secret without the prefix");
}

std::vector<WebhookTarget> resolve_webhooks(const std::vector<Webhook>& hooks,
                                            const std::vector<std::string>& urls,
                                            const std::map<std::string, std::string>& env,
                                            const std::vector<std::string>& runner_files,
                                            const SecretFileReader& read_file) {
  auto held = [&runner_files](const std::string& path) {
    return std::find(runner_files.begin(), runner_files.end(), path) != runner_files.end();
  };
  auto read = [&](const std::string& path, const std::string& what) {
    if (!read_file) throw Error(what + " " + path, "files are not read here", "use url_env");
    return read_file(path, held(path), what);
  };
  std::vector<WebhookTarget> targets;
  for (const Webhook& hook : hooks) {
    WebhookTarget target;
    std::string name;
    if (hook.url_file) {
      target.destination = "file:" + *hook.url_file;
      name = "webhook url_file " + *hook.url_file;
      target.url = read(*hook.url_file, "webhook url_file");
    } else {
      target.destination = "env:" + hook.url_env;
      name = "webhook $" + hook.url_env;
      auto url = env.find(hook.url_env);
      if (url == env.end() || url->second.empty()) {
        throw Error(name, "the variable is not set",
                    "export the webhook's URL in " + hook.url_env + ", or remove the webhook");
      }
      target.url = url->second;
    }
    require_http_url(target.url, name);
    target.format = hook.format;
    target.events = hook.events;
    if (hook.secret_file) {
      target.secret_env = "file:" + *hook.secret_file;
      target.secret = read(*hook.secret_file, "webhook secret_file");
    } else if (hook.secret_env) {
      auto secret = env.find(*hook.secret_env);
      if (secret == env.end() || secret->second.empty()) {
        throw Error(name, "its signing secret variable " + *hook.secret_env + " is not set",
                    "export the secret in " + *hook.secret_env);
      }
      target.secret_env = *hook.secret_env;
      target.secret = secret->second;
    }
    if (!target.secret.empty()) require_signing_key(target.secret, name);
    targets.push_back(std::move(target));
  }
  for (const std::string& url : urls) {
    require_http_url(url, "--webhook " + redact_url(url));
    WebhookTarget target;
    target.destination = "url:" + url;
    target.url = url;
    target.events = Webhook{}.events;
    targets.push_back(std::move(target));
  }
  return targets;
}

std::optional<WebhookTarget> resolve_destination(const std::string& destination,
                                                 const std::string& format,
                                                 const std::string& secret_env,
                                                 const std::map<std::string, std::string>& env,
                                                 const std::vector<WebhookTarget>& known) {
  WebhookTarget target;
  target.destination = destination;
  target.format = format;
  const WebhookTarget* same = nullptr;
  for (const WebhookTarget& candidate : known) {
    if (candidate.destination == destination && candidate.secret_env == secret_env) {
      same = &candidate;
      break;
    }
  }
  if (destination.rfind("env:", 0) == 0) {
    auto url = env.find(destination.substr(4));
    if (url == env.end() || url->second.empty()) return std::nullopt;
    target.url = url->second;
  } else if (destination.rfind("url:", 0) == 0) {
    target.url = destination.substr(4);
  } else if (destination.rfind("file:", 0) == 0 && same) {
    target.url = same->url;
  } else {
    return std::nullopt;
  }
  if (secret_env.rfind("file:", 0) == 0) {
    if (!same) return std::nullopt;
    target.secret_env = secret_env;
    target.secret = same->secret;
  } else if (!secret_env.empty()) {
    auto secret = env.find(secret_env);
    if (secret == env.end() || secret->second.empty()) return std::nullopt;
    target.secret_env = secret_env;
    target.secret = secret->second;
  }
  if (!target.secret.empty() && !standard_webhooks_key(target.secret)) return std::nullopt;
  return target;
}

// ---- redaction ----

std::string redact_url(const std::string& url) {
  auto parts = split_url(url);
  if (!parts) return "***";
  std::string text = parts->scheme + "://";
  if (!parts->userinfo.empty()) text += "***@";
  text += parts->host;
  if (path_is_secret(*parts) && parts->path.size() > 1) {
    text += "/***";
  } else {
    text += parts->path;
  }
  if (!parts->query.empty()) text += "?***";
  return text;
}

std::string redact_secrets(std::string text, const std::vector<std::string>& secrets) {
  std::vector<std::string> pieces;
  for (const std::string& secret : secrets) {
    if (secret.empty()) continue;
    pieces.push_back(secret);
    if (auto parts = split_url(secret)) {
      if (!parts->userinfo.empty()) pieces.push_back(parts->userinfo);
      if (path_is_secret(*parts) && parts->path.size() > 1) pieces.push_back(parts->path);
      if (!parts->query.empty()) pieces.push_back(parts->query);
    }
  }
  // Longest first, so that a whole URL goes before its parts.
  std::sort(pieces.begin(), pieces.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (const std::string& piece : pieces) {
    for (size_t at = text.find(piece); at != std::string::npos; at = text.find(piece, at + 3)) {
      text.replace(at, piece.size(), "***");
    }
  }
  return text;
}

// ---- signing ----

std::string webhook_signature(const std::string& secret, const std::string& timestamp,
                              const std::string& body) {
  return "sha256=" + to_hex(hmac_sha256(secret, timestamp + "." + body));
}

// ---- retries ----

std::optional<Nanos> parse_retry_after(const std::string& value) {
  std::string text = value;
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.erase(0, 1);
  if (text.empty() || text.size() > 9) return std::nullopt;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  return std::chrono::seconds(std::stol(text));
}

bool retryable(const AttemptResult& result) {
  if (result.transport_error) return result.retryable_transport;
  return result.status == 408 || result.status == 429 || result.status >= 500;
}

std::optional<Nanos> next_attempt_in(const AttemptResult& result, int attempts, Nanos left) {
  if (result.ok() || !retryable(result) || attempts >= kMaxAttempts) return std::nullopt;
  // 0.5 s, then 1 s; a Retry-After replaces it.
  Nanos wait = std::chrono::milliseconds(500) * (1 << (attempts - 1));
  if (result.retry_after) wait = *result.retry_after;
  if (wait + kMinAttempt > left) return std::nullopt;
  return wait;
}

DeliveryResult deliver(HttpClient& http, const WebhookTarget& target, const std::string& event_id,
                       const std::string& body, Nanos deadline,
                       const std::function<bool(Nanos)>& sleep) {
  DeliveryResult result;
  TimePoint start = now();
  std::vector<std::string> secrets = {target.url, target.secret};
  // Checked when the target was resolved (require_signing_key); a key that does not decode
  // leaves the Standard Webhooks signature out rather than sending a wrong one.
  std::optional<std::string> key = standard_webhooks_key(target.secret);
  while (true) {
    Nanos left = deadline - (now() - start);
    HttpRequest request;
    request.url = target.url;
    request.body = body;
    request.headers = {"Content-Type: application/json", "User-Agent: spendcap/0.1"};
    if (!target.secret.empty()) {
      // Signed afresh at each attempt: a receiver rejects old timestamps.
      std::string timestamp = std::to_string(static_cast<long long>(wall_now()));
      request.headers.push_back("X-Spendcap-Timestamp: " + timestamp);
      request.headers.push_back("X-Spendcap-Signature: " +
                                webhook_signature(target.secret, timestamp, body));
      // Standard Webhooks: the event id is the idempotency key, the same at every attempt and in
      // the outbox; the timestamp is the attempt's.
      request.headers.push_back("webhook-id: " + event_id);
      request.headers.push_back("webhook-timestamp: " + timestamp);
      if (key) {
        request.headers.push_back("webhook-signature: " +
                                  standard_webhooks_signature(*key, event_id, timestamp, body));
      }
    } else {
      request.headers.push_back("webhook-id: " + event_id);
      request.headers.push_back("webhook-timestamp: " +
                                std::to_string(static_cast<long long>(wall_now())));
    }
    request.connect_timeout = std::min(kConnectTimeout, left);
    request.total_timeout = std::min(kAttemptTimeout, left);
    AttemptResult attempt = http.post(request);
    ++result.attempts;
    if (attempt.ok()) {
      result.delivered = true;
      result.error.clear();
      return result;
    }
    result.retryable = retryable(attempt);
    result.error = redact_secrets(
        attempt.transport_error ? attempt.error : "HTTP " + std::to_string(attempt.status),
        secrets);
    auto wait = next_attempt_in(attempt, result.attempts, deadline - (now() - start));
    if (!wait) return result;
    if (!sleep(*wait)) return result;
  }
}

}  // namespace spendcap
