// Delivering one webhook body: where (a target resolved from the policy or the command line), how
// it is signed, which failures are retried, and what is redacted from every message about it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "spendcap/base/duration.hpp"
#include "spendcap/policy/policy.hpp"

namespace spendcap {

// ---- targets ----

struct WebhookTarget {
  // How the policy named it: "env:NAME" (url_env, --webhook-env), "file:/PATH" (url_file) or
  // "url:URL" (--webhook URL). This, never a secret URL, is what the outbox keeps.
  std::string destination;
  std::string url;  // resolved
  std::string format = "json";
  std::vector<std::string> events;
  // How the secret was named: "NAME" (secret_env) or "file:/PATH" (secret_file); "" when unsigned.
  // The outbox keeps this (its secret_env column), never the secret.
  std::string secret_env;
  std::string secret;  // resolved
  // For messages: "$NAME", "file:/PATH", or the URL with its credentials redacted.
  std::string display() const;
  bool wants(const std::string& event) const;
};

// Reads a url_file or secret_file (notify/runner_files.hpp); `runner_held` when the locked policy
// names the path.
using SecretFileReader =
    std::function<std::string(const std::string& path, bool runner_held, const std::string& what)>;

// The targets of the policy's webhooks (url_env and secret_env read from `env`, url_file and
// secret_file through `read_file`, with the runner's group for the paths in `runner_files`) and of
// --webhook URLs. Throws Error (125) for a variable that is unset or empty, a file that cannot be
// read, a URL that is not http(s), or a "whsec_" secret that is not base64.
std::vector<WebhookTarget> resolve_webhooks(const std::vector<Webhook>& hooks,
                                            const std::vector<std::string>& urls,
                                            const std::map<std::string, std::string>& env,
                                            const std::vector<std::string>& runner_files = {},
                                            const SecretFileReader& read_file = {});

// The target an outbox destination names, or nullopt when it does not resolve in `env`. A
// runner-held destination or secret ("file:...") resolves only to one of `known` (the run's own
// targets, read while the runner's group was at hand): it is never read again later.
std::optional<WebhookTarget> resolve_destination(const std::string& destination,
                                                 const std::string& format,
                                                 const std::string& secret_env,
                                                 const std::map<std::string, std::string>& env,
                                                 const std::vector<WebhookTarget>& known = {});

// Throws Error naming `what` unless `url` is an http:// or https:// URL with a host.
void require_http_url(const std::string& url, const std::string& what);

// ---- redaction ----

// The URL with its userinfo, query and (for Slack and Mattermost hooks, whose path is the
// credential) its path replaced by "***".
std::string redact_url(const std::string& url);
// `text` with every occurrence of each non-empty secret (and its redacted forms' parts) replaced by
// "***".
std::string redact_secrets(std::string text, const std::vector<std::string>& secrets);

// ---- signing ----

// "sha256=" + lowercase hex of HMAC-SHA256(secret, timestamp + "." + body).
std::string webhook_signature(const std::string& secret, const std::string& timestamp,
                              const std::string& body);

// ---- one HTTP attempt ----

struct HttpRequest {
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::string body;
  Nanos connect_timeout{}, total_timeout{};
};

struct AttemptResult {
  bool transport_error = false;  // no HTTP answer (connect, timeout, TLS, ...)
  bool retryable_transport = false;
  long status = 0;                   // the HTTP status when answered
  std::optional<Nanos> retry_after;  // a 429's or 503's Retry-After
  std::string error;                 // why, for messages (redacted by the caller)
  bool ok() const { return !transport_error && status >= 200 && status < 300; }
};

class HttpClient {
 public:
  virtual ~HttpClient() = default;
  virtual AttemptResult post(const HttpRequest& request) = 0;
};

// Parses a Retry-After value in seconds ("3"); nullopt for anything else (an HTTP date is not
// honoured: the normal backoff applies).
std::optional<Nanos> parse_retry_after(const std::string& value);

// ---- the retry rule ----

inline constexpr int kMaxAttempts = 3;
// One attempt's longest time (libcurl's total timeout), and the slack beyond it that a caller
// waiting for an attempt to end allows (scheduling on a loaded host).
inline constexpr Nanos kAttemptTimeout = std::chrono::seconds(5);
inline constexpr Nanos kAttemptSlack = std::chrono::seconds(1);
inline constexpr Nanos kDefaultDeliveryDeadline = std::chrono::seconds(10);
// How long a claim on an outbox entry holds by itself (Ledger::claim_outbox): beyond one
// delivery's deadline; a run's claim holds longer, while it runs.
inline constexpr Nanos kOutboxClaimHold = 2 * kDefaultDeliveryDeadline;

// Whether the result may be retried: connection errors and timeouts, 408, 429 and 5xx; never
// another 4xx, a TLS verification failure or an unsupported URL.
bool retryable(const AttemptResult& result);
// The wait before the next attempt, or nullopt when there is none: not retryable, `attempts`
// already made reached kMaxAttempts, or the next attempt could not start before `left` runs out.
std::optional<Nanos> next_attempt_in(const AttemptResult& result, int attempts, Nanos left);

struct DeliveryResult {
  bool delivered = false;
  bool retryable = false;  // the last failure may succeed later (spooled to the outbox)
  int attempts = 0;
  std::string error;  // redacted
};

// Posts `body` to `target`: signed afresh at each attempt (X-Spendcap-Timestamp/-Signature and
// Standard Webhooks' webhook-id/-timestamp/-signature, notify/standard_webhooks.hpp; webhook-id
// and webhook-timestamp go on unsigned events too), retried by the rule above, all within
// `deadline`. `sleep` waits between attempts and returns false when delivery must stop (exit).
DeliveryResult deliver(HttpClient& http, const WebhookTarget& target, const std::string& event_id,
                       const std::string& body, Nanos deadline,
                       const std::function<bool(Nanos)>& sleep);

// Throws Error naming `what` when `secret` is written "whsec_..." but the rest is not base64.
void require_signing_key(const std::string& secret, const std::string& what);

}  // namespace spendcap
