#include "spendcap/run/lost_runs.hpp"

#include <optional>

#include "spendcap/base/error.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/notify/payload.hpp"
#include "spendcap/notify/webhook_notifier.hpp"

namespace spendcap {

std::vector<RunWebhook> lost_event_webhooks(const std::vector<WebhookTarget>& targets) {
  std::vector<RunWebhook> hooks;
  for (const WebhookTarget& target : targets) {
    if (!target.wants("lost")) continue;
    // notify's own naming of an outbox destination, so that a flush resolves it as it would any
    // other entry of this run.
    std::optional<OutboxEntry> entry = outbox_entry_for({target, "", "lost", ""}, "", "");
    if (entry) hooks.push_back({entry->destination, entry->format, entry->secret_env});
  }
  return hooks;
}

namespace {

std::vector<OutboxEntry> lost_entries(const LostRun& lost, const std::string& currency) {
  const RunView& run = lost.run;
  RunFacts facts;
  static_cast<RunIdentity&>(facts) = run;  // the identity whole, as the ledger recorded it
  facts.currency = currency;
  facts.budget = run.budget;
  facts.rate_per_hour = run.rate_per_hour;
  facts.started_at = run.started_at;
  RunEvent event;
  event.event = "lost";
  event.reason = "lost: no heartbeat";
  event.message = "lost: charged the ceiling " + format_money(run.ceiling, currency) +
                  " (no heartbeat since " + rfc3339_utc(run.heartbeat_at) + ")";
  event.spend = run.spend;  // reconciled: exactly its ceiling
  event.ended = true;
  // When it could last have been spending, as the ledger recorded it.
  double at = run.finished_at.value_or(unix_now());
  std::string event_id = new_event_id();
  nlohmann::json payload = event_payload(facts, event, event_id, at);
  std::vector<OutboxEntry> entries;
  for (const RunWebhook& hook : lost.webhooks) {
    OutboxEntry entry;
    entry.event_id = event_id;
    entry.event = "lost";
    entry.run_id = run.id;
    entry.user = run.user;
    entry.destination = hook.destination;
    entry.format = hook.format;
    entry.secret_env = hook.secret_env;
    entry.body = event_body(hook.format, payload);
    entries.push_back(std::move(entry));
  }
  return entries;
}

}  // namespace

int tell_lost_runs(Ledger& ledger, const std::string& currency, std::string* error) {
  int told = 0;
  try {
    for (const LostRun& lost : ledger.untold_lost_runs()) {
      told += ledger.tell_lost_run(lost.run.id, lost_entries(lost, currency)) ? 1 : 0;
    }
  } catch (const Error& failure) {
    if (error) *error = format_error(failure);
  }
  return told;
}

}  // namespace spendcap
