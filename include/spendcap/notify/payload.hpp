// The webhook payload (policies/webhook-event.schema.json) and its Slack form.
#pragma once

#include "spendcap/base/text.hpp"  // rfc3339_utc

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "spendcap/base/money.hpp"
#include "spendcap/ledger/run_identity.hpp"
#include "spendcap/notify/notifier.hpp"

namespace spendcap {

// Who and what the run is (its identity, and what it costs): fixed for the run's life.
struct RunFacts : RunIdentity {
  std::string currency = "USD";
  std::optional<Money> budget;
  Money rate_per_hour;
  std::optional<double> started_at;  // unix seconds; none for a refused run
};

// The wall clock, unix seconds.
double unix_now();

// A random UUID v4 (getrandom).
std::string new_event_id();

// The JSON payload. Figures not known are left out, never sent as 0.
nlohmann::json event_payload(const RunFacts& facts, const RunEvent& event,
                             const std::string& event_id, double at);

// `text` with & < > written as &amp; &lt; &gt;, the three characters Slack reads as markup
// (mentions such as <!channel>, links such as <https://x|click>).
std::string slack_escape(const std::string& text);

// The message for Slack (and Mattermost) incoming webhooks, one a person can act on: who (user,
// team, experiment, project), spend of which budget, why, where (host, run id), the command. Block
// Kit: a header and a section of fields, every user text in plain_text objects and escaped; a
// `text` fallback, escaped, with "mrkdwn": false.
nlohmann::json slack_payload(const nlohmann::json& payload);

// The exact body posted for `format` ("json" or "slack").
std::string event_body(const std::string& format, const nlohmann::json& payload);

}  // namespace spendcap
