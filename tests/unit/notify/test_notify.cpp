#include <doctest/doctest.h>

#include <atomic>
#include <deque>
#include <thread>

#include "spendcap/base/error.hpp"
#include "spendcap/base/sha256.hpp"
#include "spendcap/notify/delivery.hpp"
#include "spendcap/notify/payload.hpp"
#include "spendcap/notify/standard_webhooks.hpp"
#include "spendcap/notify/webhook_notifier.hpp"

using namespace spendcap;
using namespace std::chrono_literals;

TEST_CASE("SHA-256 matches the FIPS 180-2 vectors") {
  CHECK(to_hex(sha256("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(to_hex(sha256("abc")) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(to_hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(to_hex(sha256(std::string(1000000, 'a'))) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("HMAC-SHA256 matches the RFC 4231 vectors") {
  CHECK(to_hex(hmac_sha256(std::string(20, '\x0b'), "Hi There")) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(to_hex(hmac_sha256("Jefe", "what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(to_hex(hmac_sha256(std::string(20, '\xaa'), std::string(50, '\xdd'))) ==
        "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  std::string key4;
  for (char c = 1; c <= 25; ++c) key4 += c;
  CHECK(to_hex(hmac_sha256(key4, std::string(50, '\xcd'))) ==
        "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  CHECK(to_hex(hmac_sha256(std::string(131, '\xaa'),
                           "Test Using Larger Than Block-Size Key - Hash Key First")) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  CHECK(to_hex(hmac_sha256(std::string(131, '\xaa'),
                           "This is a test using a larger than block-size key and a larger than "
                           "block-size data. The key needs to be hashed before being used by the "
                           "HMAC algorithm.")) ==
        "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
  // Negative control: another key gives another signature.
  CHECK(webhook_signature("k1", "1700000000", "{}") != webhook_signature("k2", "1700000000", "{}"));
  CHECK(webhook_signature("k1", "1700000000", "{}") ==
        "sha256=" + to_hex(hmac_sha256("k1", "1700000000.{}")));
}

TEST_CASE("the payload carries the run's facts and leaves out what is not known") {
  RunFacts facts;
  facts.id = "11111111-2222-4333-8444-555555555555";
  facts.team = "vision";
  facts.experiment = "vit";
  facts.user = "ada";
  facts.host = "gpu1";
  facts.command = {"python3", "train.py"};
  facts.tags = {{"lr", "3e-4"}};
  facts.budget = Money{2'000'000};
  facts.rate_per_hour = Money{36'000'000};
  facts.started_at = 1'700'000'000;
  RunEvent event{"killed", "budget:run", "run", "", Money{1'500'000}, 124, 0, true};
  nlohmann::json p = event_payload(facts, event, "e-id", 1'700'000'060);
  CHECK(p["event"] == "killed");
  CHECK(p["event_id"] == "e-id");
  CHECK(p["spend"] == "1.5");
  CHECK(p["budget"] == "2");
  CHECK(p["burn_rate_per_hour"] == "36");
  CHECK(p["started_at"] == "2023-11-14T22:13:20Z");
  CHECK(p["ended_at"] == "2023-11-14T22:14:20Z");
  CHECK(p["exit_code"] == 124);
  CHECK(p["command"] == nlohmann::json{"python3", "train.py"});
  CHECK_FALSE(p.contains("gpu_utilisation"));  // not measured: absent, never 0
  event.gpu_utilisation = 0.0;
  CHECK(event_payload(facts, event, "e", 0)["gpu_utilisation"] == 0.0);

  nlohmann::json slack = nlohmann::json::parse(event_body("slack", p));
  std::string text = slack["text"];
  CHECK(text.find("team vision") != std::string::npos);
  CHECK(text.find("experiment vit") != std::string::npos);
  CHECK(text.find("1.5") != std::string::npos);
  CHECK(text.find("budget:run") != std::string::npos);
  CHECK(new_event_id().size() == 36);
  CHECK(new_event_id() != new_event_id());
}

TEST_CASE("an end event's tracker id is the payload's tag tracker, unless the run has one") {
  RunFacts facts;
  facts.id = "r";
  facts.tags = {{"lr", "3e-4"}};
  RunEvent event{"finished", "exited", "", "", Money{1}, 0, 0, true};
  CHECK_FALSE(event_payload(facts, event, "e", 0)["tags"].contains("tracker"));
  event.tracker = "wandb:late-7";
  nlohmann::json p = event_payload(facts, event, "e", 0);
  CHECK(p["tags"] == nlohmann::json{{"lr", "3e-4"}, {"tracker", "wandb:late-7"}});
  CHECK(event_body("slack", p).find("tracker=wandb:late-7") != std::string::npos);  // its Tags
  facts.tags["tracker"] = "mlflow:env";  // admission's (MLFLOW_RUN_ID, --tag) is kept
  CHECK(event_payload(facts, event, "e", 0)["tags"]["tracker"] == "mlflow:env");
}

TEST_CASE("webhook URLs and secrets are redacted") {
  CHECK(redact_url("https://user:pw@example.com/hook") == "https://***@example.com/hook");
  CHECK(redact_url("https://hooks.slack.com/services/T0/B0/XYZ") == "https://hooks.slack.com/***");
  CHECK(redact_url("https://chat.example.com/hooks/abc123") == "https://chat.example.com/***");
  CHECK(redact_url("http://127.0.0.1:8080/events?token=abc") == "http://127.0.0.1:8080/events?***");
  CHECK(redact_url("http://127.0.0.1:8080/events") == "http://127.0.0.1:8080/events");
  std::string text =
      redact_secrets("posting to https://hooks.slack.com/services/T0/B0/XYZ with s3cret failed",
                     {"https://hooks.slack.com/services/T0/B0/XYZ", "s3cret"});
  CHECK(text.find("XYZ") == std::string::npos);
  CHECK(text.find("s3cret") == std::string::npos);
  CHECK(redact_secrets("path /services/T0/B0/XYZ alone",
                       {"https://hooks.slack.com/services/T0/B0/XYZ"})
            .find("XYZ") == std::string::npos);
}

TEST_CASE("targets: variables must be set, URLs must be http(s)") {
  Webhook hook;
  hook.url_env = "HOOK";
  hook.secret_env = "HOOK_SECRET";
  std::map<std::string, std::string> env = {{"HOOK", "https://example.com/x"},
                                            {"HOOK_SECRET", "s"}};
  auto targets = resolve_webhooks({hook}, {"http://127.0.0.1:9/y"}, env);
  REQUIRE(targets.size() == 2);
  CHECK(targets[0].destination == "env:HOOK");
  CHECK(targets[0].secret == "s");
  CHECK(targets[0].display() == "$HOOK");
  CHECK(targets[1].destination == "url:http://127.0.0.1:9/y");
  CHECK_THROWS_AS(resolve_webhooks({hook}, {}, {{"HOOK", "https://example.com/x"}}), Error);
  CHECK_THROWS_AS(resolve_webhooks({hook}, {}, {}), Error);
  CHECK_THROWS_AS(resolve_webhooks({}, {"ftp://example.com/x"}, {}), Error);
  CHECK_THROWS_AS(resolve_webhooks({}, {"file:///etc/passwd"}, {}), Error);
  CHECK(resolve_destination("env:HOOK", "json", "HOOK_SECRET", env)->url ==
        "https://example.com/x");
  CHECK_FALSE(resolve_destination("env:OTHER", "json", "", env));
  CHECK_FALSE(resolve_destination("env:HOOK", "json", "UNSET_SECRET", env));
}

TEST_CASE("the retry rule: connection errors, 408, 429 and 5xx only, within the deadline") {
  AttemptResult refused_connection{true, true};
  AttemptResult bad_tls{true, false};
  auto status = [](long code) {
    AttemptResult r;
    r.status = code;
    return r;
  };
  CHECK(retryable(refused_connection));
  CHECK_FALSE(retryable(bad_tls));
  CHECK(retryable(status(408)));
  CHECK(retryable(status(429)));
  CHECK(retryable(status(500)));
  CHECK(retryable(status(503)));
  CHECK_FALSE(retryable(status(400)));
  CHECK_FALSE(retryable(status(404)));
  CHECK_FALSE(next_attempt_in(status(200), 1, 10s));
  CHECK(next_attempt_in(status(500), 1, 10s) == Nanos(500ms));
  CHECK(next_attempt_in(status(500), 2, 10s) == Nanos(1s));
  CHECK_FALSE(next_attempt_in(status(500), 3, 10s));    // three attempts at most
  CHECK_FALSE(next_attempt_in(status(500), 1, 100ms));  // no time left
  AttemptResult limited = status(429);
  limited.retry_after = 2s;
  CHECK(next_attempt_in(limited, 1, 10s) == Nanos(2s));
  limited.retry_after = 30s;
  CHECK_FALSE(next_attempt_in(limited, 1, 10s));  // past the deadline: spooled instead
  CHECK(parse_retry_after(" 3\r\n") == Nanos(3s));
  CHECK_FALSE(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"));
}

namespace {

// Scripted answers; records each request.
class ScriptedHttp final : public HttpClient {
 public:
  explicit ScriptedHttp(std::deque<AttemptResult> answers) : answers_(std::move(answers)) {}
  AttemptResult post(const HttpRequest& request) override {
    requests.push_back(request);
    AttemptResult next = answers_.front();
    if (answers_.size() > 1) answers_.pop_front();
    return next;
  }
  std::vector<HttpRequest> requests;

 private:
  std::deque<AttemptResult> answers_;
};

AttemptResult answer(long status) {
  AttemptResult r;
  r.status = status;
  return r;
}

std::string header(const HttpRequest& request, const std::string& name) {
  for (const std::string& h : request.headers) {
    if (h.rfind(name + ": ", 0) == 0) return h.substr(name.size() + 2);
  }
  return "";
}

}  // namespace

TEST_CASE("deliver retries 500 twice then succeeds, signs every attempt, never retries 400") {
  WebhookTarget target;
  target.destination = "env:HOOK";
  target.url = "http://127.0.0.1:1/x";
  target.secret = "topsecret";
  std::vector<Nanos> waits;
  auto sleep = [&waits](Nanos wait) {
    waits.push_back(wait);
    return true;
  };
  ScriptedHttp flaky({answer(500), answer(500), answer(200)});
  DeliveryResult result = deliver(flaky, target, "evt-1", "{\"a\":1}", 10s, sleep);
  CHECK(result.delivered);
  CHECK(result.attempts == 3);
  CHECK(waits.size() == 2);
  for (const HttpRequest& request : flaky.requests) {
    std::string ts = header(request, "X-Spendcap-Timestamp");
    CHECK(header(request, "X-Spendcap-Signature") ==
          webhook_signature("topsecret", ts, "{\"a\":1}"));
    // Standard Webhooks beside it: the same id at every attempt, the attempt's timestamp.
    CHECK(header(request, "webhook-id") == "evt-1");
    CHECK(header(request, "webhook-timestamp") == ts);
    CHECK(header(request, "webhook-signature") ==
          standard_webhooks_signature("topsecret", "evt-1", ts, "{\"a\":1}"));
  }

  ScriptedHttp rejecting({answer(400)});
  result = deliver(rejecting, target, "evt-2", "{}", 10s, sleep);
  CHECK_FALSE(result.delivered);
  CHECK_FALSE(result.retryable);
  CHECK(result.attempts == 1);
  CHECK(result.error == "HTTP 400");

  AttemptResult down{true, true};
  down.error = "Failed to connect to http://127.0.0.1:1/x: refused; secret topsecret";
  ScriptedHttp unreachable({down});
  result = deliver(unreachable, target, "evt-3", "{}", 10s, sleep);
  CHECK_FALSE(result.delivered);
  CHECK(result.retryable);
  CHECK(result.attempts == 3);
  CHECK(result.error.find("topsecret") == std::string::npos);
  CHECK(result.error.find("127.0.0.1:1/x") == std::string::npos);
}

TEST_CASE("the notifier hands back what it could not deliver, for the outbox") {
  WebhookTarget target;
  target.destination = "env:HOOK";
  target.url = "http://127.0.0.1:1/x";
  target.events = {"killed"};
  RunFacts facts;
  facts.id = "r";
  WebhookNotifier notifier(facts, {target}, std::make_unique<ScriptedHttp>(std::deque{answer(503)}),
                           1s, nullptr);
  notifier.notify(RunEvent{"warning"});  // not wanted by this webhook
  notifier.notify(RunEvent{"killed", "budget:run"});
  // Not started: nothing is delivered, everything is handed back.
  NotifierLeftovers left = notifier.finish(0s);
  REQUIRE(left.undelivered.size() == 1);
  CHECK(left.undelivered[0].event == "killed");
  auto entry = outbox_entry_for(left.undelivered[0], "r", "ada");
  REQUIRE(entry);
  CHECK(entry->destination == "env:HOOK");
  CHECK(entry->body.find("http://127.0.0.1") == std::string::npos);

  PendingDelivery literal = left.undelivered[0];
  literal.target.destination = "url:https://u:p@example.com/x";
  literal.target.url = "https://u:p@example.com/x";
  CHECK_FALSE(outbox_entry_for(literal, "r", "ada"));  // a credential never goes to the ledger
}

TEST_CASE("a started notifier delivers on its own thread and reports failures") {
  WebhookTarget target;
  target.destination = "env:HOOK";
  target.url = "http://127.0.0.1:1/x";
  target.events = {"killed", "finished"};
  std::vector<std::string> lines;
  auto http = std::make_unique<ScriptedHttp>(std::deque{answer(204), answer(400)});
  WebhookNotifier notifier(RunFacts{}, {target}, std::move(http), 5s,
                           [&lines](const std::string& line) { lines.push_back(line); });
  notifier.start();
  notifier.notify(RunEvent{"finished"});
  notifier.notify(RunEvent{"killed"});
  NotifierLeftovers left = notifier.finish(5s);
  CHECK(left.undelivered.empty());  // the 400 is not kept: it would be a 400 again
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("HTTP 400") != std::string::npos);
  CHECK(lines[0].find("$HOOK") != std::string::npos);
}

TEST_CASE("base64 matches RFC 4648's vectors and refuses what is not base64") {
  CHECK(base64_encode("") == "");
  CHECK(base64_encode("f") == "Zg==");
  CHECK(base64_encode("fo") == "Zm8=");
  CHECK(base64_encode("foo") == "Zm9v");
  CHECK(base64_encode("foob") == "Zm9vYg==");
  CHECK(base64_encode("fooba") == "Zm9vYmE=");
  CHECK(base64_encode("foobar") == "Zm9vYmFy");
  for (const char* text : {"", "f", "fo", "foo", "foob", "fooba", "foobar"}) {
    CHECK(base64_decode(base64_encode(text)) == std::string(text));
  }
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  CHECK(base64_decode(base64_encode(all)) == all);
  CHECK_FALSE(base64_decode("Zm9"));  // not a multiple of 4
  CHECK_FALSE(base64_decode("Zm9v!A=="));
  CHECK_FALSE(base64_decode("Z=9v"));  // padding in the middle
  CHECK_FALSE(base64_decode("Zg==Zm9v"));
}

TEST_CASE("Standard Webhooks: whsec_ keys are base64, others their bytes; v1 over id.ts.body") {
  // The spec's example secret form; the key is what follows whsec_, decoded.
  std::string key(32, '\x07');
  std::string whsec = "whsec_" + base64_encode(key);
  CHECK(standard_webhooks_key(whsec) == key);
  CHECK(standard_webhooks_key("plain-secret") == std::string("plain-secret"));
  CHECK_FALSE(standard_webhooks_key("whsec_not base64!"));
  Sha256Digest mac = hmac_sha256(key, "msg_1.1674087231.{\"a\":1}");
  std::string expected =
      "v1," + base64_encode(std::string(reinterpret_cast<const char*>(mac.data()), mac.size()));
  CHECK(standard_webhooks_signature(key, "msg_1", "1674087231", "{\"a\":1}") == expected);
  // Negative controls: another id, timestamp or body gives another signature.
  CHECK(standard_webhooks_signature(key, "msg_2", "1674087231", "{\"a\":1}") != expected);
  CHECK(standard_webhooks_signature(key, "msg_1", "1674087232", "{\"a\":1}") != expected);
  CHECK(standard_webhooks_signature(key, "msg_1", "1674087231", "{\"a\":2}") != expected);
  CHECK_THROWS_AS(require_signing_key("whsec_%%%", "webhook $HOOK"), Error);
  CHECK_NOTHROW(require_signing_key(whsec, "webhook $HOOK"));
}

namespace {

// Every string in `node` that is a "text" of an object whose type is not plain_text.
void non_plain_texts(const nlohmann::json& node, std::vector<std::string>& out) {
  if (node.is_object()) {
    if (node.contains("text") && node["text"].is_string() &&
        node.value("type", "") != "plain_text") {
      out.push_back(node["text"]);
    }
    for (const auto& [key, value] : node.items()) non_plain_texts(value, out);
  } else if (node.is_array()) {
    for (const auto& value : node) non_plain_texts(value, out);
  }
}

}  // namespace

TEST_CASE("Slack: user text escaped, in plain_text, mrkdwn off; a message a person acts on") {
  RunFacts facts;
  facts.id = "11111111-2222-4333-8444-555555555555";
  facts.team = "vision & <!here>";
  facts.experiment = "<!channel> *urgent* <https://x|click>";
  facts.project = "p>q";
  facts.user = "ada";
  facts.host = "gpu1";
  facts.command = {"python3", "<@U123>.py"};
  facts.tags = {{"k", "<!everyone>"}};
  facts.budget = Money{2'000'000};
  RunEvent event{"killed", "budget:run", "run", "stopped <b>", Money{2'000'000}, 124, 0, true};
  nlohmann::json slack = slack_payload(event_payload(facts, event, "e", 1'700'000'100));
  std::string body = slack.dump();
  for (const char* raw : {"<!channel>", "<!here>", "<!everyone>", "<https://", "<@U123>", "p>q"}) {
    CHECK(body.find(raw) == std::string::npos);
  }
  CHECK(body.find("&lt;!channel&gt; *urgent* &lt;https://x|click&gt;") != std::string::npos);
  CHECK(body.find("vision &amp; &lt;!here&gt;") != std::string::npos);
  CHECK(slack["mrkdwn"] == false);
  // The only text outside plain_text objects is the fallback, read with mrkdwn off.
  std::vector<std::string> texts;
  non_plain_texts(slack, texts);
  REQUIRE(texts.size() == 1);
  CHECK(texts[0] == slack["text"]);
  // Who, what team, which budget, why, where.
  for (const char* part : {"User: ada", "Team: vision", "$2.00 of the run budget $2.00",
                           "Why: budget:run", "host gpu1", facts.id.c_str()}) {
    CHECK(body.find(part) != std::string::npos);
  }
  // Negative control: the escaping is what makes the difference.
  CHECK(slack_escape("<!channel>") == "&lt;!channel&gt;");
  CHECK(slack_escape("a&b") == "a&amp;b");
  CHECK(nlohmann::json{{"text", facts.experiment}}.dump().find("<!channel>") != std::string::npos);
}

namespace {

// Answers 200 after a delay (a slow receiver), and counts the requests it got.
class SlowHttp final : public HttpClient {
 public:
  explicit SlowHttp(Nanos delay, std::atomic<int>& posts) : delay_(delay), posts_(posts) {}
  AttemptResult post(const HttpRequest&) override {
    ++posts_;
    std::this_thread::sleep_for(delay_);
    return answer(200);
  }

 private:
  Nanos delay_;
  std::atomic<int>& posts_;
};

}  // namespace

// Issue 33: an attempt in flight when finish() stopped waiting was abandoned and its event spooled
// to the outbox, though the receiver answered 200 a moment later; the next run then sent the same
// webhook-id again.
TEST_CASE("finish waits for an attempt in flight: a 2xx that comes late is not spooled again") {
  WebhookTarget target;
  target.destination = "env:HOOK";
  target.url = "http://127.0.0.1:1/x";
  target.events = {"killed"};
  std::atomic<int> posts = 0;
  WebhookNotifier notifier(RunFacts{}, {target}, std::make_unique<SlowHttp>(400ms, posts), 5s,
                           nullptr);
  notifier.start();
  notifier.notify(RunEvent{"killed", "budget:run"});
  auto until = std::chrono::steady_clock::now() + 5s;
  while (posts == 0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  REQUIRE(posts == 1);
  // The wait ends while the attempt is in flight: its answer still decides.
  NotifierLeftovers left = notifier.finish(10ms);
  CHECK(left.undelivered.empty());
  CHECK(left.outbox_failed.empty());
  CHECK(posts == 1);
}

TEST_CASE("the outbox entries a run delivered but could not remove are kept for its end") {
  WebhookTarget target;
  target.destination = "env:HOOK";
  target.url = "http://127.0.0.1:1/x";
  WebhookNotifier notifier(RunFacts{}, {target},
                           std::make_unique<ScriptedHttp>(std::deque{answer(200)}), 1s, nullptr);
  notifier.owe_ack(7);
  notifier.owe_ack(9);
  CHECK(notifier.acks() == std::vector<std::int64_t>{7, 9});
  CHECK(notifier.acks() == std::vector<std::int64_t>{7, 9});  // kept until finish
  NotifierLeftovers left = notifier.finish(0s);
  CHECK(left.outbox_delivered == std::vector<std::int64_t>{7, 9});
}
