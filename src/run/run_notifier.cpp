#include "spendcap/run/run_notifier.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "spendcap/base/error.hpp"
#include "spendcap/notify/curl_http.hpp"
#include "spendcap/notify/runner_files.hpp"

namespace spendcap {

std::vector<std::pair<OutboxEntry, WebhookTarget>> resolvable_outbox(
    const std::vector<OutboxEntry>& all, const Environment& env,
    const std::vector<WebhookTarget>& known) {
  std::vector<std::pair<OutboxEntry, WebhookTarget>> out;
  for (const OutboxEntry& entry : all) {
    auto target =
        resolve_destination(entry.destination, entry.format, entry.secret_env, env, known);
    if (target) out.emplace_back(entry, std::move(*target));
  }
  return out;
}

std::vector<WebhookTarget> run_webhook_targets(const Policy& policy,
                                               const std::vector<std::string>& urls,
                                               const Environment& env,
                                               const std::optional<Policy>& locked) {
  // Only the files the locked policy names are read with the runner's group; a path from any
  // other layer is read as the caller (notify/runner_files.hpp).
  std::vector<std::string> runner_files;
  if (locked) {
    for (const Webhook& hook : locked->webhooks) {
      if (hook.url_file) runner_files.push_back(*hook.url_file);
      if (hook.secret_file) runner_files.push_back(*hook.secret_file);
    }
  }
  return resolve_webhooks(policy.webhooks, urls, env, runner_files, read_secret_file);
}

namespace {

// What the run spends at its start on the events the outbox owes: no entry is started past it,
// and one that is started has at least kOwedAttempt (a receiver that takes an attempt's whole
// timeout may have taken the event; issue 33).
constexpr Nanos kOwedDeliveryBound = std::chrono::seconds(3);
constexpr Nanos kOwedAttempt = std::chrono::seconds(6);
// A run's claim on the entries it sends: it holds anyway while the run's heartbeat is fresh; after
// the run's end it covers the bound, an attempt and a removal that waits out the ledger's retries.
constexpr Nanos kRunOutboxClaimHold = std::chrono::seconds(60);

// Whether a failed delivery surely did not reach the receiver: it could not connect, or it
// answered with an error status. Otherwise (a timeout, a reset) it may have the event.
bool surely_not_delivered(const DeliveryResult& result) {
  for (const char* text : {"HTTP ", "Couldn't connect", "Failed to connect", "Could not resolve",
                           "Connection refused"}) {
    if (result.error.find(text) != std::string::npos) return true;
  }
  return false;
}

// The outbox entries this run can send: claimed first, since a fleet's runs all start with the
// same outbox and each entry must go once (issue 33: every run resent every entry). Each is
// delivered now, before the job starts, and removed as soon as it is: a run that held delivered
// entries until its end and was killed left them to be sent again. After a failure, or past the
// bound, the rest are given back at once for the next spendcap (or `outbox flush`); an entry
// whose delivery may have arrived stays claimed until this run ends or its heartbeat goes stale.
// Returns the entries delivered whose removal failed (the ledger unreachable just then): the run
// holds their claims while it runs, and removes them before its final row (issue 33: a receiver
// that answered 2xx got the event again from the next run once the claim was free).
std::vector<std::int64_t> deliver_owed(Ledger& ledger, const RunFacts& facts,
                                       const Environment& env,
                                       const std::vector<WebhookTarget>& targets,
                                       const Reporter& reporter) {
  std::vector<std::pair<OutboxEntry, WebhookTarget>> waiting =
      resolvable_outbox(ledger.outbox(facts.user), env, targets);
  if (waiting.empty()) return {};
  std::vector<std::int64_t> ids;
  for (const auto& [entry, target] : waiting) ids.push_back(entry.id);
  std::vector<std::int64_t> claimed = ledger.claim_outbox(ids, facts.id, kRunOutboxClaimHold);
  if (claimed.empty()) return {};
  std::unique_ptr<HttpClient> http = make_curl_http();
  auto until = std::chrono::steady_clock::now() + kOwedDeliveryBound;
  bool give_back = false;
  std::vector<std::int64_t> unacked;
  for (const auto& [entry, target] : waiting) {
    if (std::find(claimed.begin(), claimed.end(), entry.id) == claimed.end()) continue;
    if (give_back || std::chrono::steady_clock::now() >= until) {
      ledger.note_outbox_failure(entry.id, "not sent: left for the next spendcap");
      continue;
    }
    DeliveryResult result =
        deliver(*http, target, entry.event_id, entry.body, kOwedAttempt, [](Nanos wait) {
          std::this_thread::sleep_for(wait);
          return true;
        });
    if (result.delivered) {
      try {
        ledger.remove_outbox(entry.id);
      } catch (const Error& error) {
        // Delivered, and still in the outbox: the rest stay claimed by this run, unsent (another
        // ledger call now would wait as long again), and go back when its claim ends.
        unacked.push_back(entry.id);
        reporter.error("outbox: " + entry.event + " event delivered, not yet removed from the " +
                       "outbox (removed before the run ends): " + format_error(error));
        break;
      }
      continue;
    }
    give_back = true;
    if (surely_not_delivered(result)) ledger.note_outbox_failure(entry.id, result.error);
    reporter.error("webhook " + target.display() + ": " + entry.event +
                   " event from the outbox not delivered: " + result.error +
                   " (kept in the outbox)");
  }
  return unacked;
}

// Removes delivered entries from the outbox; those it cannot remove are returned.
std::vector<std::int64_t> remove_delivered(Ledger& ledger, const std::vector<std::int64_t>& ids) {
  std::vector<std::int64_t> left;
  for (std::int64_t id : ids) {
    try {
      ledger.remove_outbox(id);
    } catch (const Error&) {
      left.push_back(id);
    }
  }
  return left;
}

}  // namespace

std::unique_ptr<WebhookNotifier> make_run_notifier(std::vector<WebhookTarget> targets,
                                                   RunFacts facts, Ledger& ledger,
                                                   const Environment& env,
                                                   const Reporter& reporter) {
  std::vector<std::int64_t> unacked;
  try {
    unacked = deliver_owed(ledger, facts, env, targets, reporter);
  } catch (const Error& error) {
    reporter.error("outbox: " + format_error(error));
  }
  if (targets.empty()) {
    // No notifier to carry them to the run's end: one more try now.
    if (!remove_delivered(ledger, unacked).empty()) {
      reporter.error(
          "outbox: a delivered event could not be removed from the outbox: it may be "
          "sent again (receivers drop a repeated webhook-id)");
    }
    return nullptr;
  }
  // libcurl is loaded by the first delivery, on the notifier's thread, not here (issue 14).
  std::unique_ptr<HttpClient> http = make_lazy_curl_http();
  auto notifier = std::make_unique<WebhookNotifier>(
      std::move(facts), std::move(targets), std::move(http), kDefaultDeliveryDeadline,
      [&reporter](const std::string& line) { reporter.error(line); });
  for (std::int64_t id : unacked) notifier->owe_ack(id);
  return notifier;
}

void finish_run_notifier(WebhookNotifier& notifier, Ledger& ledger, const RunFacts& facts,
                         bool ledger_usable, const Reporter& reporter) {
  NotifierLeftovers left = notifier.finish(notifier.deadline());
  if (!ledger_usable) {
    if (!left.undelivered.empty()) {
      reporter.error("webhooks: " + std::to_string(left.undelivered.size()) +
                     " event(s) not delivered, and the ledger is unreachable: they are lost");
    }
    if (!left.outbox_delivered.empty()) {
      reporter.error("outbox: " + std::to_string(left.outbox_delivered.size()) +
                     " delivered event(s) could not be removed from the outbox, the ledger being "
                     "unreachable: they may be sent again (receivers drop a repeated webhook-id)");
    }
    return;
  }
  if (!remove_delivered(ledger, left.outbox_delivered).empty()) {
    reporter.error(
        "outbox: a delivered event could not be removed from the outbox: it may be "
        "sent again (receivers drop a repeated webhook-id)");
  }
  try {
    for (const auto& [id, why] : left.outbox_failed) ledger.note_outbox_failure(id, why);
    int spooled = 0;
    for (const PendingDelivery& delivery : left.undelivered) {
      auto entry = outbox_entry_for(delivery, facts.id, facts.user);
      if (!entry) {
        reporter.error("webhook " + delivery.target.display() + ": " + delivery.event +
                       " event lost: its --webhook URL holds credentials, which the outbox never "
                       "keeps (use --webhook-env)");
        continue;
      }
      ledger.add_outbox(*entry);
      ++spooled;
    }
    if (spooled > 0) {
      reporter.error("webhooks: " + std::to_string(spooled) +
                     " event(s) not delivered in time are kept in the ledger's outbox; "
                     "`spendcap outbox flush` (or the next run) sends them");
    }
  } catch (const Error& error) {
    reporter.error("outbox: " + format_error(error));
  }
}

}  // namespace spendcap
