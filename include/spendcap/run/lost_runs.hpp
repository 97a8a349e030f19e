// Lost runs are told (issue 19, item 5). A run records at its start which of its webhooks want its
// `lost` event (by their outbox names, never a secret). Whoever then finds it reconciled (any
// command that opens the ledger: the next run's admission, `ps`, `report`, `budgets`, `outbox
// flush`) queues that event in the outbox, for the lost run's user, once: the ledger marks it told
// in the same transaction (Ledger::tell_lost_run), so two reconcilers racing queue one event. The
// next run's start-of-run flush or `spendcap outbox flush` of that user delivers it.
#pragma once

#include <string>
#include <vector>

#include "spendcap/ledger/ledger.hpp"
#include "spendcap/notify/delivery.hpp"

namespace spendcap {

// The run's webhooks that want `lost`, named as the outbox names them; a --webhook URL holding
// credentials is left out (the outbox never keeps one).
std::vector<RunWebhook> lost_event_webhooks(const std::vector<WebhookTarget>& targets);

// Queues the `lost` event of every reconciled lost run not told yet; returns how many runs were
// told here. Figures are in `currency`. Never throws: a ledger error is returned in `error`.
int tell_lost_runs(Ledger& ledger, const std::string& currency, std::string* error = nullptr);

}  // namespace spendcap
