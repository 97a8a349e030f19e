#include "spendcap/policy/key_docs.hpp"

#include <map>

namespace spendcap {

namespace {

using Docs = std::map<std::string, PolicyKeyDoc, std::less<>>;

Docs build_docs() {
  Docs docs = {
      {"/$schema", {"string", "", "for editors (\"./policy.schema.json\"); ignored"}},
      {"/description", {"string", "", "free text; ignored"}},
      {"/currency",
       {"string, an ISO 4217 code", "", "the currency of every amount and price in the file"}},
      {"/ledger",
       {"string", "$XDG_DATA_HOME/spendcap/ledger.db",
        "\"sqlite:PATH\", a plain path (SQLite) or a \"postgresql://\" URL; keep a password out "
        "of the URL (messages print it as ***)"}},
      {"/ledger_password_file",
       {"absolute path", "",
        "the PostgreSQL ledger's password, in a file only the runner's identity reads "
        "(root:spendcap "
        "0640 on a shared runner); given to libpq as the connection's password, never in a URL"}},
      {"/locked",
       {"boolean", "false",
        "only meaningful in /etc/spendcap/policy.json: every other layer may only tighten it"}},
      {"/mode",
       {"\"enforce\" or \"warn\"", "",
        "warn stops nothing and records what would have been stopped and when"}},
      {"/rates", {"object", "{}", "prices: gpu, instance, storage_per_gb_month, egress_per_gb"}},
      {"/rates/storage_per_gb_month",
       {"money >= 0", "",
        "checkpoint storage per GB-month (30 days, 2^30 bytes), for run --checkpoint-dir"}},
      {"/rates/egress_per_gb",
       {"money >= 0", "", "price per GB of egress that runs report, a column of report"}},
      {"/defaults", {"object", "", "how runs are priced and stopped"}},
      {"/defaults/pricing",
       {"\"on_demand\", \"spot\" or \"reserved\"", "", "which price of a sheet a run pays"}},
      {"/defaults/billing",
       {"\"allocated\" or \"measured\"", "",
        "allocated: rate x wall time; measured: the GPU part of the rate by busy GPU time"}},
      {"/defaults/grace", {"duration", "", "time between the checkpoint signal and SIGTERM"}},
      {"/defaults/kill_after", {"duration", "", "time between SIGTERM and SIGKILL"}},
      {"/defaults/grace_on_signal",
       {"duration", "",
        "the grace when spendcap itself is signalled (schedulers SIGKILL 30 s after SIGTERM)"}},
      {"/defaults/kill_after_on_signal",
       {"duration", "", "the kill-after when spendcap itself is signalled"}},
      {"/defaults/interval", {"duration > 0", "", "how often live figures are refreshed"}},
      {"/defaults/sync", {"duration, 1s to 1h", "", "how often a run heartbeats to the ledger"}},
      {"/defaults/claim_horizon",
       {"duration, 1s to 24h", "",
        "how far ahead a run's ceiling is claimed from shared budgets, within a "
        "fair share of what they have left"}},
      {"/defaults/checkpoint_signal",
       {"signal (\"SIGUSR1\", \"USR2\", \"10\") or \"none\"", "",
        "sent to the processes that catch it when a run trips; none skips the grace"}},
      {"/defaults/isolation",
       {"\"pid\" or \"none\"", "pid where the kernel allows it, else none",
        "pid: the job runs in its own PID namespace and cannot signal spendcap; set, a run that "
        "cannot have it is refused (125)"}},
      {"/defaults/warn_at",
       {"array of numbers in (0, 1], ascending", "[0.5, 0.8, 0.95]",
        "warning thresholds, as fractions of each budget"}},
      {"/defaults/gpu",
       {"string", "", "the GPU type of a run that names none (a key of rates.gpu)"}},
      {"/defaults/gpus", {"count", "", "GPUs per instance"}},
      {"/defaults/instance",
       {"string", "", "the instance type of a run that names none (a key of rates.instance)"}},
      {"/defaults/instances", {"count", "", "number of instances"}},
      {"/defaults/team", {"string", "", "the team of a run that names none (--team)"}},
      {"/defaults/experiment",
       {"string", "", "the experiment of a run that names none (--experiment)"}},
      {"/defaults/project", {"string", "", "the project of a run that names none (--project)"}},
      {"/defaults/rate",
       {"money > 0", "",
        "the burn rate in USD per hour of a run that gives no --rate, --gpu or --instance"}},
      {"/defaults/budget", {"money > 0", "", "the run budget of a run that gives no --budget"}},
      {"/budgets", {"object", "{}", "budgets by scope kind: team, experiment, project, user"}},
      {"/budgets/*/*/amount", {"money > 0", "required", "the budget for one period"}},
      {"/budgets/*/*/period",
       {"\"day\", \"week\", \"month\" or \"total\"", "",
        "calendar UTC period, or total (never resets); a run belongs to the period it started in"}},
      {"/budgets/*/*/max_run",
       {"money > 0", "", "the most one run may be granted (a larger --budget is lowered to it)"}},
      {"/budgets/*/*/members",
       {"object", "anyone", "who may charge runs to the budget and stop its runs"}},
      {"/budgets/*/*/members/unix_groups",
       {"non-empty array of Unix group names", "",
        "only members of these groups (and the ledger's owner) may charge or stop the budget's "
        "runs"}},
      {"/budgets/*/*/expected_per_hour",
       {"money > 0", "", "the expected burn rate, for the burn-rate guard"}},
      {"/budgets/*/*/metric", {"string", "", "the progress metric to cost, e.g. \"val_acc\""}},
      {"/budgets/*/*/baseline_metric", {"number", "", "the metric's value before this work"}},
      {"/budgets/*/*/metric_goal",
       {"\"max\" or \"min\"", "", "whether the metric improves upward or downward"}},
      {"/guards",
       {"object", "{}",
        "runaway guards; a guard is on when its key is present, crash_loop and respawn_loop also "
        "without it"}},
      {"/guards/crash_loop", {"object", "", "refuse a command that keeps failing"}},
      {"/guards/crash_loop/enabled", {"boolean", "", "false turns the guard off"}},
      {"/guards/crash_loop/max_failures",
       {"count", "",
        "refuse (120) the same team, experiment and command after this many failures with no "
        "success since..."}},
      {"/guards/crash_loop/window", {"duration > 0", "", "...within this window"}},
      {"/guards/crash_loop/shared",
       {"boolean", "false",
        "count every user's failures of the command (by default only the caller's own)"}},
      {"/guards/respawn_loop",
       {"object", "", "stop a run whose processes keep restarting after abnormal exits"}},
      {"/guards/respawn_loop/enabled", {"boolean", "", "false turns the guard off"}},
      {"/guards/respawn_loop/max_restarts",
       {"count", "",
        "stop (123) when the same program and parent restart after an abnormal exit more than "
        "this..."}},
      {"/guards/respawn_loop/window", {"duration > 0", "", "...within this window"}},
      {"/guards/respawn_loop/min_life",
       {"duration > 0", "",
        "without the process connector (not root): a replaced pid that lived less than this "
        "counts, and the guard only warns"}},
      {"/guards/idle_gpu", {"object", "", "stop a run whose GPUs stay idle"}},
      {"/guards/idle_gpu/enabled",
       {"boolean", "", "on whenever the run's GPUs are measured; false turns it off"}},
      {"/guards/idle_gpu/below_percent",
       {"number in (0, 100]", "",
        "stop (123) when every GPU of the run stays below this utilisation..."}},
      {"/guards/idle_gpu/for", {"duration > 0", "", "...for this long"}},
      {"/guards/stall", {"object", "", "stop a run whose progress lines stop"}},
      {"/guards/stall/after",
       {"duration > 0", "", "stop (123) after this long without a progress line"}},
      {"/guards/burn_rate",
       {"object", "", "warn when a run burns faster than its experiment expects"}},
      {"/guards/burn_rate/factor",
       {"number >= 1", "",
        "warn when the burn rate exceeds factor x the experiment budget's expected_per_hour"}},
      {"/energy", {"object", "", "figures for energy and CO2 reporting"}},
      {"/energy/pue", {"number >= 1", "1.0", "power usage effectiveness of the site"}},
      {"/energy/kg_co2_per_kwh", {"number >= 0", "", "grid carbon intensity"}},
      {"/energy/usd_per_kwh",
       {"number >= 0", "", "energy price, for reports only: never added to spend"}},
      {"/webhooks", {"array of objects", "[]", "endpoints told of a run's events"}},
      {"/webhooks/*/url_env",
       {"environment variable name", "", "the variable that holds the URL (or url_file)"}},
      {"/webhooks/*/url_file",
       {"absolute path", "", "instead of url_env: a file only the runner's identity reads"}},
      {"/webhooks/*/secret_env",
       {"environment variable name", "", "the variable that holds the signing secret"}},
      {"/webhooks/*/secret_file",
       {"absolute path", "", "instead of secret_env: a file only the runner's identity reads"}},
      {"/webhooks/*/format", {"\"json\" or \"slack\"", "\"json\"", "the payload"}},
      {"/webhooks/*/events",
       {"array of event names", "[\"warning\", \"killed\", \"refused\", \"lost\"]",
        "what to send: warning, killed, refused, lost, finished, stop-order, overrun, preempted"}},
      {"/webhooks/*/url",
       {"refused", "", "a literal URL is refused: name the variable that holds it in url_env"}},
      {"/webhooks/*/secret",
       {"refused", "", "a literal secret is refused: name its variable in secret_env"}},
      {"/metrics_dir",
       {"string", "", "directory for Prometheus textfiles (one per run, a summary per team)"}},
  };
  for (const char* kind : {"team", "experiment", "project", "user"}) {
    docs["/budgets/" + std::string(kind)] = {
        "object: name -> budget", "{}", std::string("the budgets of each ") + kind + " by name"};
  }
  for (const char* kind : {"gpu", "instance"}) {
    std::string at = std::string("/rates/") + kind;
    std::string per = std::string(kind) + "-hour";
    docs[at] = {"object: type -> price sheet", "{}",
                "prices per " + per +
                    " by type; a sheet sets at least one of on_demand, spot, "
                    "reserved"};
    docs[at + "/*/on_demand"] = {"money >= 0", "", "on-demand price per " + per};
    docs[at + "/*/spot"] = {"money >= 0", "", "spot price per " + per};
    docs[at + "/*/reserved"] = {"money >= 0", "", "reserved (committed) price per " + per};
    docs[at + "/*/peak_tflops"] = {"number > 0", "", "dense peak TFLOP/s, for estimate"};
    docs[at + "/*/memory_gb"] = {"number > 0", "", "memory per device, for estimate --compare"};
  }
  return docs;
}

const Docs& docs() {
  static const Docs all = build_docs();
  return all;
}

}  // namespace

const PolicyKeyDoc* find_policy_key_doc(std::string_view path) {
  auto it = docs().find(path);
  return it == docs().end() ? nullptr : &it->second;
}

std::vector<std::string> documented_policy_paths() {
  std::vector<std::string> paths;
  for (const auto& [path, doc] : docs()) paths.push_back(path);
  return paths;
}

}  // namespace spendcap
