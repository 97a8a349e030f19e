// Webhooks in the CLI (issue 9): `spendcap outbox list|flush` and `spendcap notify test`. The run's
// own notifier is run/run_notifier.hpp's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "spendcap/cli/admin.hpp"

namespace spendcap {

int outbox_list_command(const LedgerChoice& choice, bool json);
int outbox_flush_command(const LedgerChoice& choice);

struct NotifyTestRequest {
  std::optional<std::string> policy;
  std::vector<std::string> webhook_envs, webhook_urls;
};
int notify_test_command(const NotifyTestRequest& request);

}  // namespace spendcap
