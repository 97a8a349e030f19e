#include "spendcap/run/run_notifier.hpp"

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

std::unique_ptr<WebhookNotifier> make_run_notifier(std::vector<WebhookTarget> targets,
                                                   RunFacts facts, Ledger& ledger,
                                                   const Environment& env,
                                                   const Reporter& reporter) {
  std::vector<std::pair<OutboxEntry, WebhookTarget>> waiting;
  try {
    waiting = resolvable_outbox(ledger.outbox(facts.user), env, targets);
  } catch (const Error& error) {
    reporter.error("outbox: " + format_error(error));
  }
  if (targets.empty() && waiting.empty()) return nullptr;
  // libcurl is loaded by the first delivery, on the notifier's thread, not here (issue 14).
  std::unique_ptr<HttpClient> http = make_lazy_curl_http();
  auto notifier = std::make_unique<WebhookNotifier>(
      std::move(facts), std::move(targets), std::move(http), kDefaultDeliveryDeadline,
      [&reporter](const std::string& line) { reporter.error(line); });
  for (auto& [entry, target] : waiting) notifier->resend(entry, std::move(target));
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
    return;
  }
  try {
    for (std::int64_t id : left.outbox_delivered) ledger.remove_outbox(id);
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
