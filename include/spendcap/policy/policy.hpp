// The policy: rates, defaults, budgets, guards, webhooks: the user-facing contract, a JSON file
// (format in policies/README.md, schema in policies/policy.schema.json). Parsing validates the
// whole document and reports every error with its JSON path ("/budgets/team/vision/amount: must be
// a positive number"); unknown keys are errors, so a typo can never silently disable a budget.
// Where policies are found and how a locked system policy is layered: policy_layers.hpp.
#pragma once

#include <signal.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "spendcap/base/duration.hpp"
#include "spendcap/base/error.hpp"
#include "spendcap/base/money.hpp"

namespace spendcap {

enum class Pricing { on_demand, spot, reserved };
enum class Billing { allocated, measured };
enum class Mode { enforce, warn };
// pid: the job runs in its own PID namespace and cannot signal spendcap; none: no isolation.
enum class Isolation { pid, none };
enum class Period { day, week, month, total };
// The scopes a budget can be attached to. `job` (one job across restarts, --job-key) and `run` are
// given on the command line; the others come from the policy and live in the ledger.
enum class ScopeKind { team, experiment, project, user, job, run };

// Every pricing's text comes from this one function: `policy` spells it as policy files and
// --pricing take it ("on_demand"); `display` as the ledger's column and reports write it
// ("on-demand"). parse_pricing reads both.
enum class PricingSpelling { policy, display };
std::string to_string(Pricing pricing, PricingSpelling spelling = PricingSpelling::policy);
std::string to_string(Billing billing);                       // "allocated"
std::string to_string(Mode mode);                             // "enforce"
std::string to_string(Period period);                         // "month"
std::string to_string(ScopeKind kind);                        // "team"
std::optional<Pricing> parse_pricing(std::string_view text);  // "on_demand" or "on-demand", ...
std::optional<Mode> parse_mode(std::string_view text);
std::string to_string(Isolation isolation);  // "pid"
std::optional<Isolation> parse_isolation(std::string_view text);
std::optional<Period> parse_period(std::string_view text);
std::optional<ScopeKind> parse_scope_kind(std::string_view text);

// Signal names: "SIGUSR1", "USR1", "usr1" or a number. 0 means "none".
std::optional<int> parse_signal(std::string_view text);
std::string signal_name(int signal);  // "SIGUSR1"; "none" for 0
// SIGCHLD, SIGWINCH, SIGURG, SIGCONT: their default action is to ignore them, so as a checkpoint
// signal they act as none for a job that installs no handler.
bool ignored_by_default(int signal);

struct PriceSheet {
  std::optional<Money> on_demand, spot, reserved;  // per hour
  std::optional<double> peak_tflops;               // for estimates
  std::optional<Money> price(Pricing pricing) const;
  std::optional<double> memory_gb;  // per GPU, for `estimate --compare`
};

struct BudgetSpec {
  Money amount;
  Period period = Period::month;
  std::optional<Money> max_run;            // the most one run may be granted
  std::optional<Money> expected_per_hour;  // for the burn-rate guard
  std::optional<std::string> metric;       // for cost per metric point (later)
  std::optional<double> baseline_metric;
  std::optional<std::string> metric_goal;  // "max" or "min"
  // Who may charge runs to it and stop its runs (besides the ledger's owner): members of any of
  // these Unix groups. Empty: anyone.
  std::vector<std::string> member_groups;
};

// "members": {"unix_groups": [...]} of a budget entry.
struct BudgetMembers {
  std::vector<std::string> unix_groups;
};

struct Defaults {
  Pricing pricing = Pricing::on_demand;
  Billing billing = Billing::allocated;
  Nanos grace = std::chrono::seconds(60);
  Nanos kill_after = std::chrono::seconds(10);
  // Schedulers send SIGKILL 30 s after SIGTERM (Slurm's KillWait, Kubernetes' grace period): 15 s
  // of grace + 5 s of kill-after leave time for the final ledger row, status file and webhook.
  Nanos grace_on_signal = std::chrono::seconds(15);
  Nanos kill_after_on_signal = std::chrono::seconds(5);
  Nanos interval = std::chrono::seconds(1);
  Nanos sync = std::chrono::seconds(5);
  Nanos claim_horizon = std::chrono::minutes(5);
  int checkpoint_signal = SIGUSR1;  // 0 = none
  // Unset: a PID namespace wherever the kernel allows one, else none (said on the start line).
  // Set to pid: required; a run that cannot have it is refused.
  std::optional<Isolation> isolation;
  std::vector<double> warn_at = {0.5, 0.8, 0.95};
  // The hardware a runner has (shared runners set these so that users cannot claim less).
  std::optional<std::string> gpu;
  std::optional<int> gpus;
  std::optional<std::string> instance;
  std::optional<int> instances;
  // A project's defaults for `spendcap run` (its ./spendcap.json), so that `spendcap run -- CMD`
  // is enough there: flags and $SPENDCAP_TEAM... win over them (run/settings.hpp).
  std::optional<std::string> team, experiment, project;
  std::optional<Money> rate;    // USD per hour, as --rate (refused under a locked policy)
  std::optional<Money> budget;  // as --budget
};

struct CrashLoopGuard {
  int max_failures = 5;
  Nanos window = std::chrono::minutes(10);
  bool enabled = true;  // on without a policy; "enabled": false turns it off
  bool shared = false;  // count every user's failures of the command, not only the caller's
};
struct RespawnLoopGuard {
  int max_restarts = 10;
  Nanos window = std::chrono::minutes(5);
  bool enabled = true;                        // on without a policy; false turns it off
  Nanos min_life = std::chrono::seconds(10);  // the fallback detector's "too short to be healthy"
};
struct IdleGpuGuard {
  double below_percent = 5;
  Nanos for_duration = std::chrono::minutes(30);
  bool enabled = true;  // on whenever GPUs are measured; "enabled": false turns it off
};
struct StallGuard {
  Nanos after = std::chrono::minutes(20);
};
struct BurnRateGuard {
  double factor = 2.0;
};
struct Guards {
  std::optional<CrashLoopGuard> crash_loop;
  std::optional<RespawnLoopGuard> respawn_loop;
  std::optional<IdleGpuGuard> idle_gpu;
  std::optional<StallGuard> stall;
  std::optional<BurnRateGuard> burn_rate;
};

struct Energy {
  double pue = 1.0;
  std::optional<double> kg_co2_per_kwh;
  std::optional<double> usd_per_kwh;  // for reports only, never added to spend
};

struct Webhook {
  std::string
      url_env;  // the URL is read from this environment variable (secrets stay out of files)
  std::string format = "json";  // "json" or "slack"
  std::vector<std::string> events = {"warning", "killed", "refused", "lost"};
  std::optional<std::string> secret_env;
  // Runner-held instead (issue 19): files only the runner's identity reads (notify/runner_files).
  std::optional<std::string> url_file;
  std::optional<std::string> secret_file;
};

struct Policy {
  std::string currency = "USD";
  std::optional<std::string> ledger;  // "sqlite:/path", a path, or "postgresql://..."
  // The PostgreSQL ledger's password, in a file only the runner reads (issue 19; runner_files).
  std::optional<std::string> ledger_password_file;
  bool locked = false;
  Mode mode = Mode::enforce;
  std::map<std::string, PriceSheet> gpu_rates;
  std::map<std::string, PriceSheet> instance_rates;
  std::optional<Money> storage_per_gb_month;
  Defaults defaults;
  std::map<ScopeKind, std::map<std::string, BudgetSpec>>
      budgets;  // team, experiment, project, user
  Guards guards;
  Energy energy;
  std::vector<Webhook> webhooks;
  std::optional<std::string> metrics_dir;
  std::optional<Money> egress_per_gb;  // rates.egress_per_gb: reports price the egress runs report
};

// Thrown for an invalid policy: one line per error, each "JSON-PATH: what is wrong", section by
// section in the order of policies/README.md. Exit code 125.
class PolicyError : public Error {
 public:
  PolicyError(std::string source, std::vector<std::string> errors);
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  std::vector<std::string> errors_;
};

// Every error of `document`, as "JSON-PATH: message"; empty when it is valid.
std::vector<std::string> validate_policy(const nlohmann::json& document);

// As validate_policy, for a layer that will be merged over another document (policy_layers.hpp):
// types, ranges and unknown keys are checked; required keys and cross-references (defaults.gpu
// must name a rate) are left to the merged document.
std::vector<std::string> validate_policy_layer(const nlohmann::json& document);

// Validates, then converts. Throws PolicyError naming `source` (a path, "$SPENDCAP_POLICY", ...).
Policy parse_policy(const nlohmann::json& document, const std::string& source);

// Reads and parses a file; a file that is not JSON is a PolicyError with the line and column.
nlohmann::json read_policy_file(const std::string& path);

}  // namespace spendcap
