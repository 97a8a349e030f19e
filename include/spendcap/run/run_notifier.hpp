// The run's webhooks (issue 9): resolved before admission, the notifier started once the guard is
// forked and drained at exit into the ledger's outbox. `spendcap outbox` and `spendcap notify test`
// (cli/webhooks.hpp) resolve targets and outbox entries the same way.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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

// The caller's outbox entries that resolve in `env`, with their targets (`known`: the run's own,
// whose secrets are already read).
std::vector<std::pair<OutboxEntry, WebhookTarget>> resolvable_outbox(
    const std::vector<OutboxEntry>& all, const Environment& env,
    const std::vector<WebhookTarget>& known = {});

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

}  // namespace spendcap
