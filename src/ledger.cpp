// The backend-independent part of the ledger: names, staleness, the budget arithmetic every backend
// shares, and opening a ledger by url.
#include "spendcap/ledger.hpp"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "spendcap/error.hpp"
#include "spendcap/sqlite_ledger.hpp"
#include "spendcap/text.hpp"

namespace spendcap {

std::string to_string(const Scope& scope) {
  return to_string(scope.kind) + ":" + scope.name;
}

namespace {
constexpr RunStatus kRunStatuses[] = {RunStatus::running, RunStatus::succeeded, RunStatus::failed,
                                      RunStatus::killed,  RunStatus::refused,   RunStatus::lost};
}  // namespace

std::string to_string(RunStatus status) {
  switch (status) {
    case RunStatus::running:
      return "running";
    case RunStatus::succeeded:
      return "succeeded";
    case RunStatus::failed:
      return "failed";
    case RunStatus::killed:
      return "killed";
    case RunStatus::refused:
      return "refused";
    case RunStatus::lost:
      return "lost";
  }
  return "?";
}

std::optional<RunStatus> parse_run_status(std::string_view text) {
  for (RunStatus status : kRunStatuses) {
    if (text == to_string(status)) return status;
  }
  return std::nullopt;
}

Nanos stale_after(Nanos sync) {
  return std::max(3 * sync, sync + Nanos(std::chrono::seconds(2)));
}

// ---- budget arithmetic ----

std::int64_t utc_day(double unix_seconds) {
  return static_cast<std::int64_t>(std::floor(unix_seconds / 86400.0));
}

DayRange period_days(Period period, std::int64_t day) {
  using namespace std::chrono;
  switch (period) {
    case Period::day:
      return {day, day};
    case Period::week: {
      // 1970-01-01 was a Thursday: Monday-based weekday = (day + 3) mod 7, floored.
      std::int64_t weekday = ((day + 3) % 7 + 7) % 7;
      return {day - weekday, day - weekday + 6};
    }
    case Period::month: {
      year_month_day date{sys_days{days{day}}};
      sys_days first{date.year() / date.month() / 1};
      sys_days last{year_month_day_last{date.year(), month_day_last{date.month()}}};
      return {first.time_since_epoch().count(), last.time_since_epoch().count()};
    }
    case Period::total:
      break;
  }
  return {std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()};
}

bool is_stale(double heartbeat_at, Nanos sync, double now) {
  return now - heartbeat_at > to_seconds(stale_after(sync));
}

double reconcile_at(double heartbeat_at, Money ceiling, Money spend, Money rate_per_hour,
                    Nanos shutdown, Nanos sync) {
  double stale_seconds = to_seconds(stale_after(sync));
  if (rate_per_hour.micros <= 0) return heartbeat_at + stale_seconds + to_seconds(shutdown);
  double spending_seconds = to_seconds(time_to_cost(rate_per_hour, ceiling - spend));
  return heartbeat_at + std::max(stale_seconds, spending_seconds + to_seconds(shutdown));
}

RunBudget effective_run_budget(std::optional<Money> budget, const std::vector<BudgetRule>& rules) {
  RunBudget result{budget, std::nullopt};
  for (const BudgetRule& rule : rules) {
    if (rule.max_run && (!result.amount || *rule.max_run < *result.amount)) {
      result.amount = rule.max_run;
      result.lowered_by = rule.scope;
    }
  }
  return result;
}

GrantDecision decide_grant(Money old_ceiling, Money old_allowed, Money want, Mode mode,
                           const std::vector<ScopeHeadroom>& headrooms) {
  Money limit = want;
  std::optional<Scope> binding;
  for (const ScopeHeadroom& scope : headrooms) {
    if (scope.headroom < limit) {
      limit = scope.headroom;
      binding = scope.scope;
    }
  }
  Money allowed = std::max(old_allowed, std::max(limit, Money{}));
  if (allowed >= want) binding.reset();  // what it held already covers it: nothing limited it
  if (mode == Mode::enforce) return {std::max(old_ceiling, allowed), allowed, binding};
  return {std::max(old_ceiling, want), allowed, binding};
}

// ---- opening ----

std::string default_ledger_url() {
  std::string data_home;
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && xdg[0] == '/') {
    data_home = xdg;  // the XDG spec: a relative $XDG_DATA_HOME is invalid and ignored
  } else {
    const char* home = std::getenv("HOME");
    if (!home || !*home) {
      const passwd* entry = getpwuid(geteuid());
      home = entry ? entry->pw_dir : "/";
    }
    data_home = std::string(home) + "/.local/share";
  }
  return "sqlite:" + data_home + "/spendcap/ledger.db";
}

std::optional<std::string> sqlite_path_of_url(const std::string& url) {
  std::string_view text = url;
  if (text.starts_with("sqlite:")) {
    text.remove_prefix(7);
    if (text.starts_with("//")) text.remove_prefix(2);  // sqlite:///var/x
    return std::string(text);
  }
  if (text.find("://") != std::string_view::npos) return std::nullopt;
  return std::string(text);
}

std::unique_ptr<Ledger> open_ledger(const std::string& url, LedgerOptions options) {
  if (url.starts_with("postgresql://") || url.starts_with("postgres://")) {
    throw Error("ledger " + redact_password(url), "the PostgreSQL ledger is not built yet",
                "use a sqlite: ledger on this host for now");
  }
  std::optional<std::string> path = sqlite_path_of_url(url);
  if (!path) {
    throw Error("ledger " + redact_password(url), "unknown kind of ledger",
                "use sqlite:/path/ledger.db, a path, or postgresql://...");
  }
  if (path->empty())
    throw Error("ledger " + redact_password(url), "no file named", "write sqlite:/path/ledger.db");
  return std::make_unique<SqliteLedger>(*path, std::move(options));
}

}  // namespace spendcap
