// The helpers the admin verbs share (admin_parts.hpp).
#include "admin_parts.hpp"
#include "spendcap/cli/admin.hpp"

#include <sys/time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "spendcap/base/json_numbers.hpp"
#include "spendcap/base/json_text.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/cli/runs.hpp"
#include "spendcap/ledger/backends.hpp"
#include "spendcap/ledger/spool.hpp"
#include "spendcap/notify/runner_files.hpp"
#include "spendcap/policy/keys.hpp"
#include "spendcap/policy/layers.hpp"
#include "spendcap/run/ledger_group.hpp"
#include "spendcap/run/lost_runs.hpp"
#include "spendcap/run/membership.hpp"
#include "spendcap/supervise/run_env.hpp"

namespace spendcap {

namespace admin_parts {

double wall_now() {
  timeval tv{};
  ::gettimeofday(&tv, nullptr);
  return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6;
}

std::string utc_date(double unix_seconds) {
  if (unix_seconds <= 0) return "-";
  return format_utc(unix_seconds, UtcForm::date);
}

std::string age(double seconds) {
  if (seconds < 0) seconds = 0;
  return format_duration(std::chrono::seconds(static_cast<std::int64_t>(seconds)));
}

// What a budget has spent: finished runs, and running runs so far (their last heartbeats).
Money used(const BudgetView& view) {
  return view.spent + view.live;
}

std::string percent_used(const BudgetView& view) {
  if (view.rule.amount.micros <= 0) return "-";
  char text[16];
  std::snprintf(text, sizeof text, "%.1f%%",
                100.0 * static_cast<double>(used(view).micros) /
                    static_cast<double>(view.rule.amount.micros));
  return text;
}

LoadedPolicy load_chosen_policy(const LedgerChoice& choice) {
  return (choice.reading ? load_policy_for_reading : load_policy)(
      PolicySearch::from_environment(choice.policy),
      PolicyLayer{"command line", nlohmann::json::object()});
}

double utc_now() {
  return static_cast<double>(std::time(nullptr));
}

}  // namespace admin_parts

}  // namespace spendcap
