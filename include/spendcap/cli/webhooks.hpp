// Webhooks in the CLI (issue 9): the run's notifier (resolved before admission, started once the
// guard is forked, drained at exit into the ledger's outbox), `spendcap outbox list|flush` and
// `spendcap notify test`.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "spendcap/cli/admin.hpp"
#include "spendcap/ledger/ledger.hpp"
#include "spendcap/notify/webhook_notifier.hpp"
#include "spendcap/supervise/reporter.hpp"
#include "spendcap/supervise/run_env.hpp"

namespace spendcap {

// The run's webhooks: the policy's (with --webhook-env) and --webhook URLs. Throws Error (125)
// for an unset variable, an unreadable url_file/secret_file or a URL that is not http(s), before
// anything is written to the ledger. The files `locked` names are read with the runner's group;
// call this before the ledger is opened (the group is dropped for good then).
std::vector<WebhookTarget> run_webhook_targets(const Policy& policy,
                                               const std::vector<std::string>& urls,
                                               const Environment& env,
                                               const std::optional<Policy>& locked = std::nullopt);

// The run's notifier, or null when there is nothing to deliver (no webhook, and no outbox entry of
// this user that resolves here). Loads libcurl only when not null. Outbox entries that resolve are
// queued first (the flush tried at the start of each run).
std::unique_ptr<WebhookNotifier> make_run_notifier(std::vector<WebhookTarget> targets,
                                                   RunFacts facts, Ledger& ledger,
                                                   const Environment& env,
                                                   const Reporter& reporter);

// Waits at most the delivery deadline, then spools what is left in the outbox (`ledger_usable`
// false: the ledger did not take the final row, so the events are reported lost instead) and
// records the start-of-run flush's results.
void finish_run_notifier(WebhookNotifier& notifier, Ledger& ledger, const RunFacts& facts,
                         bool ledger_usable, const Reporter& reporter);

int outbox_list_command(const LedgerChoice& choice, bool json);
int outbox_flush_command(const LedgerChoice& choice);

struct NotifyTestRequest {
  std::optional<std::string> policy;
  std::vector<std::string> webhook_envs, webhook_urls;
};
int notify_test_command(const NotifyTestRequest& request);

}  // namespace spendcap
