#include "spendcap/cli/run.hpp"
#include "spendcap/base/acting_user.hpp"
#include "spendcap/cli/report_commands.hpp"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "spendcap/base/files.hpp"
#include "spendcap/base/json_numbers.hpp"
#include "spendcap/base/json_text.hpp"
#include "spendcap/base/signals.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/cli/ledger_group.hpp"
#include "spendcap/cli/lost_runs.hpp"
#include "spendcap/cli/membership.hpp"
#include "spendcap/cli/multi_node.hpp"
#include "spendcap/cli/webhooks.hpp"
#include "spendcap/guards/crash_loop.hpp"
#include "spendcap/ledger/backends.hpp"
#include "spendcap/ledger/spool.hpp"
#include "spendcap/notify/runner_files.hpp"
#include "spendcap/policy/keys.hpp"
#include "spendcap/process/cgroup.hpp"
#include "spendcap/process/privileged_run.hpp"
#include "spendcap/process/tree_guard.hpp"
#include "spendcap/spend/meter.hpp"
#include "spendcap/supervise/metrics_part.hpp"
#include "spendcap/supervise/metrics_part_writer.hpp"
#include "spendcap/supervise/outcome.hpp"
#include "spendcap/supervise/reporter.hpp"
#include "spendcap/supervise/signal_forward.hpp"
#include "spendcap/supervise/supervisor.hpp"

namespace spendcap {

namespace {

// How long the final row may take before it is spooled instead: the job is already over, and a
// scheduler's SIGKILL may be on its way (see grace_on_signal).
constexpr auto kFinalRowTimeout = std::chrono::seconds(5);

int parse_count(const std::string& text, const std::string& flag) {
  char* end = nullptr;
  errno = 0;
  long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || value < 0 || value > 100000) {
    throw Error(flag + " " + text, "not a count", "give a whole number like 8");
  }
  return static_cast<int>(value);
}

// Where a flag's value goes in the flags layer: the policy path its row in keys.cpp names.
nlohmann::json& flag_slot(nlohmann::json& layer, std::string_view flag) {
  const PolicyKey* key = policy_key_for_flag(flag);
  if (!key) throw std::logic_error("no policy key for " + std::string(flag));
  return layer[nlohmann::json::json_pointer(key->path)];
}

// The flags that are policy settings, as a policy fragment: the locked-policy rules then check
// files and flags alike. Values are validated here first so that errors name the flag.
nlohmann::json flags_layer(const RunRequest& request) {
  nlohmann::json layer = nlohmann::json::object();
  auto duration = [&](const std::optional<std::string>& value, const char* flag) {
    if (!value) return;
    parse_duration_or_throw(*value, flag);
    flag_slot(layer, flag) = *value;
  };
  duration(request.grace, "--grace");
  duration(request.kill_after, "--kill-after");
  duration(request.interval, "--interval");
  duration(request.sync, "--sync");
  duration(request.claim_horizon, "--claim-horizon");
  duration(request.stall_after, "--stall-after");
  if (request.checkpoint_signal) {
    auto signal = parse_signal(*request.checkpoint_signal);
    if (!signal || *signal == SIGKILL || *signal == SIGSTOP) {
      throw Error("--checkpoint-signal " + *request.checkpoint_signal, "not a signal it can send",
                  "give a name like SIGUSR1 or USR2, or none");
    }
    flag_slot(layer, "--checkpoint-signal") = signal_name(*signal);
  }
  if (request.pricing) {
    auto pricing = parse_pricing(*request.pricing);
    if (!pricing) {
      throw Error("--pricing " + *request.pricing, "unknown pricing",
                  "give on-demand, spot or reserved");
    }
    flag_slot(layer, "--pricing") = to_string(*pricing);
  }
  if (request.billing) {
    if (*request.billing != "allocated" && *request.billing != "measured") {
      throw Error("--billing " + *request.billing, "unknown billing", "give allocated or measured");
    }
    flag_slot(layer, "--billing") = *request.billing;
  }
  if (request.mode) {
    if (!parse_mode(*request.mode)) {
      throw Error("--mode " + *request.mode, "unknown mode", "give enforce or warn");
    }
    flag_slot(layer, "--mode") = *request.mode;
  }
  if (request.isolation) {
    if (!parse_isolation(*request.isolation)) {
      throw Error("--isolation " + *request.isolation, "unknown isolation", "give pid or none");
    }
    flag_slot(layer, "--isolation") = *request.isolation;
  }
  if (request.gpu) flag_slot(layer, "--gpu") = *request.gpu;
  if (request.gpus) flag_slot(layer, "--gpus") = parse_count(*request.gpus, "--gpus");
  if (request.instance) flag_slot(layer, "--instance") = *request.instance;
  if (request.instances) {
    flag_slot(layer, "--instances") = parse_count(*request.instances, "--instances");
  }
  if (request.ledger) flag_slot(layer, "--ledger") = *request.ledger;
  if (request.metrics_dir) flag_slot(layer, "--metrics-dir") = *request.metrics_dir;
  // --webhook-env NAME adds a webhook (appended to the policy's: a locked policy's stay).
  for (const std::string& name : request.webhook_envs) {
    layer["webhooks"].push_back({{"url_env", name}});
  }
  return layer;
}

// A refusal names the flag the user typed, not the policy path it sets (the flag rows of keys.cpp).
std::string with_flag_names(std::string text) {
  for (const PolicyKey& key : policy_keys()) {
    if (key.flag.empty()) continue;
    std::string from = key.path + ":";
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at)) {
      text.replace(at, from.size(), key.flag + ":");
    }
  }
  return text;
}

// load_policy, with a refusal of the flags layer naming the flags ("--grace: 120s is longer than
// the locked 60s") instead of policy paths.
LoadedPolicy load_policy_naming_flags(const PolicySearch& search, nlohmann::json flags) {
  try {
    return load_policy(search, PolicyLayer{"command line", flags});
  } catch (const PolicyError& error) {
    // A merged document that is invalid because of a flag (an unknown --gpu type): name the flag.
    if (error.subject().find("command line") == std::string::npos) throw;
    std::vector<std::string> errors;
    std::optional<Error> flag_error;  // the first error that is a flag's
    bool all_from_flags = true;
    for (const std::string& line : error.errors()) {
      std::string path = line.substr(0, line.find(':'));
      bool from_flag =
          path.size() > 1 && path[0] == '/' && flags.contains(nlohmann::json::json_pointer(path));
      all_from_flags = all_from_flags && from_flag;
      errors.push_back(from_flag ? with_flag_names(line) : line);
      if (from_flag && !flag_error) {
        // "--gpu a100: unknown GPU type ..." : the file is fine (policy check says so); the flag
        // is what it lacks.
        std::string named = with_flag_names(line);
        std::string flag = named.substr(0, named.find(':'));
        const nlohmann::json& value = flags.at(nlohmann::json::json_pointer(path));
        std::string shown = value.is_string() ? value.get<std::string>() : value.dump();
        std::string why = line.size() > path.size() + 2 ? line.substr(path.size() + 2) : line;
        flag_error = Error(flag + " " + shown, why,
                           "give one the policy knows (" +
                               error.subject().substr(0, error.subject().find(" + command line")) +
                               "), or add it there");
      }
    }
    if (all_from_flags && flag_error && errors.size() == 1) throw *flag_error;
    throw PolicyError(error.subject(), errors);
  } catch (const Error& error) {
    if (error.subject() != "command line") throw;
    Error renamed("command line", with_flag_names(error.why()), error.hint(), error.code());
    for (const std::string& detail : error.details) {
      renamed.details.push_back(with_flag_names(detail));
    }
    throw renamed;
  }
}

std::string known_types(const std::map<std::string, PriceSheet>& rates) {
  std::vector<std::string> names;
  for (const auto& [name, sheet] : rates) names.push_back(name);
  return names.empty() ? "none" : join(names, ", ");
}

Money price_of(const std::map<std::string, PriceSheet>& rates, const std::string& type,
               Pricing pricing, const char* flag, const char* kind) {
  auto it = rates.find(type);
  if (it == rates.end()) {
    throw Error(std::string(flag) + " " + type,
                std::string("no rate for this ") + kind + " type in the policy",
                "known types: " + known_types(rates));
  }
  auto price = it->second.price(pricing);
  if (!price) {
    throw Error(std::string(flag) + " " + type,
                "the policy has no " + to_string(pricing) + " price for it",
                "choose another --pricing");
  }
  return *price;
}

// burn rate = instances x (gpus x GPU rate + instance rate) at the chosen pricing.
void resolve_rate(const RunRequest& request, const Environment& env, RunSettings& settings) {
  const Policy& policy = settings.loaded.policy;
  if (request.rate) {
    if (settings.loaded.locked) {
      throw Error("--rate " + *request.rate,
                  "the locked policy " + settings.loaded.locked_source + " sets the rates",
                  "give --gpu / --instance types it prices instead");
    }
    settings.rate_per_hour = parse_money_or_throw(*request.rate, "--rate");
    settings.rate_source = "--rate";
    if (settings.rate_per_hour.micros == 0) {
      throw Error("--rate " + *request.rate, "a run needs a burn rate above 0",
                  "give what the job costs per hour");
    }
    settings.gpu_rate_per_hour = settings.rate_per_hour;  // --rate: the whole rate buys the GPUs
    return;
  }
  const Defaults& d = policy.defaults;
  if (!d.gpu && !d.instance) {
    throw Error("run", "no burn rate",
                "give --rate USD_PER_HOUR, or --gpu TYPE / --instance TYPE priced by the policy");
  }
  int instances = d.instances.value_or(1);
  Money per_instance, gpus_per_instance;
  std::string source;
  if (d.gpu) {
    int gpus = d.gpus ? *d.gpus : gpus_from_environment(env).value_or(1);
    Money gpu_price = price_of(policy.gpu_rates, *d.gpu, d.pricing, "--gpu", "GPU");
    auto gpus_price = checked_times(gpu_price, gpus);
    if (!gpus_price) {
      throw Error("--gpus " + std::to_string(gpus) + " --gpu " + *d.gpu,
                  "the burn rate is beyond the largest amount spendcap handles",
                  "check --gpus and the policy's prices");
    }
    per_instance += *gpus_price;
    gpus_per_instance = *gpus_price;
    source = std::to_string(gpus) + " x " + *d.gpu;
    settings.tags["gpu"] = *d.gpu;
    settings.tags["gpus"] = std::to_string(gpus);
  }
  if (d.instance) {
    per_instance +=
        price_of(policy.instance_rates, *d.instance, d.pricing, "--instance", "instance");
    source += (source.empty() ? "" : " + ") + *d.instance;
    settings.tags["instance"] = *d.instance;
  }
  auto rate = checked_times(per_instance, instances);
  if (!rate || per_instance > kMaxMoney) {
    throw Error("--instances " + std::to_string(instances),
                "the burn rate is beyond the largest amount spendcap handles",
                "check --instances, --gpus and the policy's prices");
  }
  settings.rate_per_hour = *rate;
  // The GPU part: the GPUs' price with --gpu; an instance priced alone buys its GPUs in its price.
  settings.gpu_rate_per_hour = d.gpu ? *checked_times(gpus_per_instance, instances) : *rate;
  if (instances != 1) source = std::to_string(instances) + " x (" + source + ")";
  settings.rate_source = source + " " + to_string(d.pricing);
  if (settings.rate_per_hour.micros == 0) {
    throw Error("burn rate", "is 0 for " + settings.rate_source,
                "check --gpus, --instances and the policy's prices");
  }
}

// Under a locked policy that defines budgets, every run is charged to one of them: otherwise a run
// without --team (or with a made-up team) would answer only to its own --budget.
void require_a_locked_budget(const RunSettings& settings) {
  if (!settings.loaded.locked_policy) return;
  const auto& budgets = settings.loaded.locked_policy->budgets;
  if (budgets.empty()) return;
  for (const Scope& scope : named_scopes(settings)) {
    auto named = budgets.find(scope.kind);
    if (named != budgets.end() && named->second.count(scope.name)) return;
  }
  std::vector<std::string> choices;
  for (const auto& [kind, named] : budgets) {
    std::vector<std::string> names;
    for (const auto& [budget_name, spec] : named) names.push_back(budget_name);
    choices.push_back("--" + to_string(kind) + " " + join(names, "|"));
  }
  throw Error("run",
              "the locked policy " + settings.loaded.locked_source +
                  " charges every run to one of its budgets, and this run matches none",
              "give " + join(choices, " or "));
}

}  // namespace

TestSwitches TestSwitches::from(const Environment& env) {
  TestSwitches switches;
  auto it = env.find("SPENDCAP_TEST_SWITCHES");
  if (it == env.end()) return switches;
  for (const std::string& name : split(it->second, ',')) {
    if (name == "no-cgroup") {
      switches.no_cgroup = true;
    } else if (name == "no-subreaper") {
      switches.no_subreaper = true;
    } else if (name == "no-ceilings") {
      switches.no_ceilings = true;
    } else if (name == "no-proc-connector") {
      switches.no_proc_connector = true;
    } else if (name == "storage-every-second") {
      switches.storage_every_second = true;
    } else {
      throw Error("SPENDCAP_TEST_SWITCHES " + it->second, "unknown switch " + name,
                  "known: no-cgroup, no-subreaper, no-ceilings, no-proc-connector, "
                  "storage-every-second");
    }
  }
  return switches;
}

namespace {

// The reserve (rate x (grace + kill-after)) and the first claim (rate x horizon) are exact 128-bit
// products, but must fit the ledger's int64 micro-units: `--rate 1000000000000 --grace 5000h`
// once wrapped to a small reserve and started. Refused instead, naming the flags that set them.
void require_money_fits(const RunRequest& request, const RunSettings& settings) {
  Nanos horizon = std::max(settings.claim_horizon, 2 * settings.sync);
  auto reserve = checked_cost_of_rounded_up(settings.rate_per_hour, settings.on_trip.total());
  auto claim = checked_cost_of_rounded_up(settings.rate_per_hour, horizon);
  if (reserve && claim && *reserve + *claim <= kMaxMoney) return;
  std::string flags = request.rate ? "--rate " + *request.rate : settings.rate_source;
  if (request.grace) flags += " --grace " + *request.grace;
  if (request.kill_after) flags += " --kill-after " + *request.kill_after;
  if (request.claim_horizon) flags += " --claim-horizon " + *request.claim_horizon;
  throw Error(flags,
              "the shutdown reserve and first claim are beyond the largest amount spendcap "
              "handles (" +
                  format_money(kMaxMoney) + ")",
              "lower --rate, --grace, --kill-after or --claim-horizon");
}

}  // namespace

namespace {

// --spot-notice, its base URL (--spot-notice-url, else $SPENDCAP_SPOT_METADATA_URL), and the
// shutdown times that fit its notice window.
void resolve_spot_notice(const RunRequest& request, const Environment& env, RunSettings& settings) {
  if (!request.spot_notice) {
    if (request.spot_notice_url) {
      throw Error("--spot-notice-url " + *request.spot_notice_url, "given without --spot-notice",
                  "add --spot-notice aws or --spot-notice gcp");
    }
    return;
  }
  std::string base;
  if (request.spot_notice_url) {
    base = *request.spot_notice_url;
  } else if (auto it = env.find("SPENDCAP_SPOT_METADATA_URL"); it != env.end()) {
    base = it->second;
  }
  settings.spot_notice = parse_spot_notice(*request.spot_notice, base);
  settings.on_preemption =
      preemption_times(*settings.spot_notice, settings.on_trip, settings.on_signal);
}

}  // namespace

RunSettings resolve_run_settings(const RunRequest& request, const Environment& env,
                                 const PolicySearch& search) {
  if (request.command.empty()) {
    throw Error("run", "no command given",
                "give the command after --, e.g. spendcap run --rate 36 --budget 10 -- python3 "
                "train.py");
  }
  require_printable_name(request.team, "--team");
  require_printable_name(request.experiment, "--experiment");
  require_printable_name(request.project, "--project");
  RunSettings settings;
  settings.loaded = load_policy_naming_flags(search, flags_layer(request));
  const Policy& policy = settings.loaded.policy;

  if (request.budget) settings.budget = parse_money_or_throw(*request.budget, "--budget");
  for (const std::string& tag : request.tags) {
    size_t eq = tag.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw Error("--tag " + tag, "not KEY=VALUE", "write it like --tag lr=3e-4");
    }
    require_printable_name(tag.substr(0, eq), "--tag");
    settings.tags[tag.substr(0, eq)] = tag.substr(eq + 1);
  }
  for (const auto& [key, value] : scheduler_tags(env)) settings.tags.try_emplace(key, value);
  resolve_rate(request, env, settings);

  const Defaults& d = policy.defaults;
  settings.on_trip = ShutdownTimes{d.grace, d.kill_after};
  // A signal to spendcap gets the shorter of the two: schedulers SIGKILL soon after SIGTERM.
  settings.on_signal = ShutdownTimes{std::min(d.grace, d.grace_on_signal),
                                     std::min(d.kill_after, d.kill_after_on_signal)};
  settings.checkpoint_signal = d.checkpoint_signal;
  if (ignored_by_default(settings.checkpoint_signal)) {
    std::cerr << "spendcap: checkpoint signal " << signal_name(settings.checkpoint_signal)
              << ": ignored by default, so a job without a handler for it never checkpoints (as "
                 "with none)\n";
  }
  // Nothing accepted that does nothing: keys that are validated but not acted on yet are said.
  for (const std::string& key : keys_without_effect(settings.loaded.document)) {
    std::cerr << "spendcap: policy " << escape_for_terminal(key) << "\n";
  }
  settings.isolation = d.isolation;
  settings.mode = policy.mode;
  settings.interval = d.interval;
  settings.sync = d.sync;
  settings.claim_horizon = d.claim_horizon;
  settings.warn_at = d.warn_at;
  settings.ledger_url = policy.ledger ? *policy.ledger : default_ledger_url();
  require_money_fits(request, settings);
  settings.team = request.team;
  settings.experiment = request.experiment;
  settings.project = request.project;
  settings.job_key = request.job_key;
  if (request.exit_window) {
    settings.exit_window = parse_duration_or_throw(*request.exit_window, "--exit-window");
  }
  for (const std::string& name : request.forward) {
    settings.forward_signals.push_back(forwardable_signal_or_throw(name));
  }
  settings.user = user_name();
  settings.host = host_name();
  if (auto joined = resolve_multi_node_run(request.run_id, settings.job_key, env, settings.host)) {
    // One run over many wrappers: its id is their job key, and each row says its node.
    settings.job_key = joined->id;
    settings.tags["node"] = joined->node;
    settings.node = joined->node;
  }
  settings.webhook_urls = request.webhook_urls;
  require_a_locked_budget(settings);
  resolve_spot_notice(request, env, settings);
  return settings;
}

namespace {

// Opens the ledger, replays what earlier runs on this host spooled, and, on a personal ledger (the
// caller's own file), applies the policy's budgets: loading the owner's policy applies it.
std::shared_ptr<Ledger> open_run_ledger(const RunSettings& settings, const TestSwitches& switches,
                                        const Reporter& reporter) {
  LedgerOptions options;
  options.ignore_other_runs = switches.no_ceilings;
  if (settings.loaded.locked_policy) {
    options.budget_caps = budget_rules_of(*settings.loaded.locked_policy);
  }
  options.postgres_password =
      ledger_password(settings.loaded.policy, settings.loaded.locked_policy);
  std::shared_ptr<Ledger> ledger = open_ledger_as_installed(settings.ledger_url, options);
  // The switches weaken what spendcap enforces: only on a ledger that is the caller's alone.
  if (switches.any() && !ledger->is_personal()) {
    throw Error("SPENDCAP_TEST_SWITCHES",
                "test-only switches are refused on a shared ledger (" + ledger->url() + ")",
                "unset SPENDCAP_TEST_SWITCHES; they work on a personal ledger only");
  }
  if (int replayed = replay_spool(*ledger)) {
    reporter.line("replayed " + std::to_string(replayed) + " spooled final rows into " +
                  ledger->url());
  }
  // Under a locked policy only the locked policy's own budgets, never a user layer's.
  const Policy& owner_policy =
      settings.loaded.locked_policy ? *settings.loaded.locked_policy : settings.loaded.policy;
  std::vector<BudgetRule> rules = budget_rules_of(owner_policy);
  if (!rules.empty() && ledger->is_personal()) ledger->apply_budgets(rules, false);
  return ledger;
}

RunStart make_run_start(const RunSettings& settings, const std::vector<std::string>& command,
                        const std::string& run_id) {
  RunStart run;
  run.id = run_id;
  run.job_key = settings.job_key;
  run.team = settings.team;
  run.experiment = settings.experiment;
  run.project = settings.project;
  run.user = settings.user;
  run.host = settings.host;
  run.tags = settings.tags;
  run.command = command;
  run.fingerprint = command_fingerprint(settings.team, settings.experiment, command);
  run.pid = ::getpid();
  run.mode = settings.mode;
  run.rate_per_hour = settings.rate_per_hour;
  run.pricing = settings.loaded.policy.defaults.pricing;  // --pricing or the policy's
  run.reserve = shutdown_reserve(settings.rate_per_hour, settings.on_trip);
  run.budget = settings.budget;
  run.shutdown = settings.on_trip.total();
  run.sync = settings.sync;
  run.want =
      claim_ahead(settings.rate_per_hour, settings.claim_horizon, settings.sync, run.reserve);
  return run;
}

// The run's private directory: $SPENDCAP_CHECKPOINT_DONE lives in it. Made before admission, so
// that failing to make it costs nothing in the ledger; removed at the end (by the guard when
// spendcap is killed).
class RunDir {
 public:
  RunDir(const Environment& env, const std::string& run_id) {
    auto tmp = env.find("TMPDIR");
    std::string base = tmp != env.end() && !tmp->second.empty() ? tmp->second : "/tmp";
    std::string pattern = base + "/spendcap-" + run_id.substr(0, 8) + "-XXXXXX";
    if (!::mkdtemp(pattern.data())) {
      throw Error(base, "cannot create the run directory: " + errno_text(errno),
                  "set TMPDIR to a writable directory");
    }
    path_ = pattern;
  }
  ~RunDir() { remove(); }
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  const std::string& path() const { return path_; }
  std::string checkpoint_done() const { return checkpoint_done_path(path_); }
  std::string progress() const { return path_ + "/progress.jsonl"; }
  void remove() noexcept {
    ::unlink(checkpoint_done().c_str());
    ::unlink(progress().c_str());
    ::rmdir(path_.c_str());
  }

 private:
  std::string path_;
};

// A run the ledger admitted holds a ceiling until its final row. If spendcap fails before the
// command is launched, the row is finished here (failed, nothing spent) instead of waiting to be
// reconciled and charged its whole ceiling.
class AdmittedRun {
 public:
  AdmittedRun(Ledger& ledger, std::string run_id) : ledger_(ledger), run_id_(std::move(run_id)) {}
  ~AdmittedRun() {
    if (launched_) return;
    try {
      ledger_.finish_run(
          RunFinal{run_id_, RunStatus::failed, "not launched", std::nullopt, Money{}, 0});
    } catch (...) {
      // Still held: the lost-run reconciliation charges it. Nothing else can be done here.
    }
  }
  AdmittedRun(const AdmittedRun&) = delete;
  AdmittedRun& operator=(const AdmittedRun&) = delete;
  void launched() { launched_ = true; }

 private:
  Ledger& ledger_;
  std::string run_id_;
  bool launched_ = false;
};

std::vector<std::string> secret_variables(const Policy& policy) {
  std::vector<std::string> names;
  for (const Webhook& hook : policy.webhooks) {
    if (!hook.url_env.empty()) names.push_back(hook.url_env);  // a Slack URL is itself a secret
    if (hook.secret_env) names.push_back(*hook.secret_env);
  }
  return names;
}

std::string run_label(const RunSettings& settings) {
  std::string label;
  auto add = [&label](const char* name, const std::string& value) {
    if (!value.empty()) label += (label.empty() ? "" : ", ") + std::string(name) + " " + value;
  };
  add("team", settings.team);
  add("experiment", settings.experiment);
  add("project", settings.project);
  add("job", settings.job_key);
  return label;
}

// GPU measurement: the devices the environment allocates, the policy's energy figures, and the
// idle guard (on by default: the policy's guards.idle_gpu, else its defaults).
GpuPlan make_gpu_plan(const Policy& policy, const Environment& env) {
  GpuPlan gpu;
  auto library = env.find("SPENDCAP_NVML_LIBRARY");
  gpu.enabled = library == env.end() || library->second != "none";
  std::vector<std::string> entries;
  for (const auto& [name, value] : env) entries.push_back(name + "=" + value);
  std::vector<const char*> pointers;
  for (const std::string& entry : entries) pointers.push_back(entry.c_str());
  pointers.push_back(nullptr);
  gpu.allocation = gpu_allocation_from_environment(pointers.data());
  gpu.allocated = gpu.allocation.entries;
  gpu.pue = policy.energy.pue;
  gpu.kg_co2_per_kwh = policy.energy.kg_co2_per_kwh;
  gpu.usd_per_kwh = policy.energy.usd_per_kwh;
  IdleGpuGuard idle = policy.guards.idle_gpu.value_or(IdleGpuGuard{});
  if (idle.enabled) gpu.idle_below = idle.below_percent / 100.0;
  gpu.idle_for = idle.for_duration;
  return gpu;
}

std::string summary_line(const RunOutcome& outcome) {
  // The ledger's status and reason, as the status file and `spendcap runs` give them: Ctrl-C is
  // "killed (interrupted)" everywhere.
  std::string line = "run " + outcome.run_id.substr(0, 8) + " " + to_string(outcome.status);
  if (outcome.stopped_by_spendcap || outcome.reason == "interrupted") {
    line += " (" + outcome.reason + ")";
  }
  // A multi-node run: the node whose trip stopped them all (issue 23).
  if (!outcome.first_trip.empty()) line += " (first trip: " + outcome.first_trip + ")";
  char elapsed[32];
  std::snprintf(elapsed, sizeof elapsed, "%.2fs", outcome.elapsed_seconds);
  line +=
      " after " + std::string(elapsed) + ": spent " + format_money(outcome.spend, outcome.currency);
  if (outcome.budget) line += " of " + format_money(*outcome.budget, outcome.currency);
  if (outcome.storage_spend && outcome.storage_peak_gb) {
    char peak[64];
    std::snprintf(peak, sizeof peak, "%.3f", *outcome.storage_peak_gb);
    line += " (storage " + format_money(*outcome.storage_spend, outcome.currency) + ", peak " +
            peak + " GB)";
  }
  // Stopped from outside (SIGSTOP, without isolation) past its ceiling: said, never hidden.
  if (outcome.spend > outcome.ceiling && outcome.ceiling > Money{}) {
    line += " (OVERRUN: " + format_money(outcome.spend - outcome.ceiling, outcome.currency) +
            " above its ceiling " + format_money(outcome.ceiling, outcome.currency) + ")";
  }
  line += "; exit " + std::to_string(outcome.exit_code);
  return line;
}

void write_status(const RunRequest& request, const RunOutcome& outcome, const Reporter& reporter) {
  if (!request.status_file) return;
  try {
    write_status_file(*request.status_file, outcome);
  } catch (const Error& error) {
    reporter.error(format_error(error));
  }
}

[[noreturn]] void reraise(int signal) {
  ::signal(signal, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, signal);
  ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
  ::raise(signal);
  // Still here: the signal's default is to ignore it (as PID 1 in a container). Exit as a shell
  // would report it.
  ::_exit(shell_status(signal));
}

// Refused at admission (120): says why, and writes the status file.
int refuse(const RunRequest& request, const RunSettings& settings, const std::string& run_id,
           const Admission& admission, const Reporter& reporter) {
  // The run's own budget cannot even hold the shutdown reserve: no other run is to blame, and
  // the fix is in the caller's flags.
  Money reserve = shutdown_reserve(settings.rate_per_hour, settings.on_trip);
  bool reserve_too_big = admission.run_budget && *admission.run_budget <= reserve &&
                         (!admission.refused_by || admission.refused_by->kind == ScopeKind::run);
  std::string refusal = admission.refusal;
  if (reserve_too_big) {
    refusal = "the shutdown reserve " + format_money(reserve, settings.loaded.policy.currency) +
              " (grace " + format_duration(settings.on_trip.grace) + " + kill-after " +
              format_duration(settings.on_trip.kill_after) + " + 1s at " +
              format_money(settings.rate_per_hour, settings.loaded.policy.currency) +
              "/h) does not fit in the budget " +
              format_money(*admission.run_budget, settings.loaded.policy.currency) +
              " (lower --grace or raise --budget)";
  }
  reporter.error("refused: " + refusal);
  RunOutcome refused;
  refused.run_id = run_id;
  refused.status = RunStatus::refused;
  refused.reason = reserve_too_big ? "reserve-exceeds-budget" : "refused";
  refused.exit_code = to_int(ExitCode::refused);
  refused.currency = settings.loaded.policy.currency;
  refused.rate_per_hour = settings.rate_per_hour;
  refused.budget = admission.run_budget;
  refused.message = refusal;
  write_status(request, refused, reporter);
  if (int signal = take_pending_stop_signal()) reraise(signal);
  return refused.exit_code;
}

// What the guard launches: the command, its environment, the fds and signals spendcap inherited.
LaunchSpec make_launch_spec(const RunRequest& request, const std::string& executable,
                            const RunSettings& settings, const Environment& env,
                            const Inherited& inherited, const std::string& run_id,
                            const Admission& admission, const RunDir& run_dir,
                            const std::string& cgroup_dir) {
  JobIdentity identity{run_id,
                       settings.team,
                       settings.experiment,
                       settings.project,
                       admission.run_budget ? to_decimal(*admission.run_budget) : "",
                       signal_name(settings.checkpoint_signal),
                       run_dir.checkpoint_done(),
                       run_dir.progress()};
  LaunchSpec spec;
  spec.executable = executable;
  spec.argv = request.command;
  spec.env = job_environment(env, identity, secret_variables(settings.loaded.policy));
  spec.inherited = inherited;
  spec.cgroup_dir = cgroup_dir;
  spec.take_terminal = ::isatty(STDIN_FILENO) && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp();
  return spec;
}

SupervisorPlan make_plan(const RunSettings& settings, const std::string& run_id,
                         const Admission& admission, const RunDir& run_dir, bool gave_terminal) {
  SupervisorPlan plan;
  plan.run_id = run_id;
  plan.label = run_label(settings);
  plan.currency = settings.loaded.policy.currency;
  plan.rate_per_hour = settings.rate_per_hour;
  plan.run_budget = admission.run_budget;
  plan.grant = admission.grant;
  plan.on_trip = settings.on_trip;
  plan.on_signal = settings.on_signal;
  plan.checkpoint_signal = settings.checkpoint_signal;
  plan.mode = settings.mode;
  plan.warn_at = settings.warn_at;
  plan.sync = settings.sync;
  plan.claim_horizon = settings.claim_horizon;
  plan.interval = settings.interval;
  plan.checkpoint_done_path = run_dir.checkpoint_done();
  plan.gave_terminal = gave_terminal;
  if (!settings.node.empty()) {
    plan.multi_node_run_id = settings.job_key;
    plan.node = settings.node;
  }
  if (settings.spot_notice) {
    plan.preemption_part = spot_notice_part(*settings.spot_notice);
    plan.on_preemption = settings.on_preemption;
  }
  plan.exit_window = settings.exit_window;
  plan.forward_signals.assign(std::begin(kForwardedByDefault), std::end(kForwardedByDefault));
  plan.forward_signals.insert(plan.forward_signals.end(), settings.forward_signals.begin(),
                              settings.forward_signals.end());
  return plan;
}

// --log FILE: appended to, made if missing; -1 without the flag.
int open_log(const RunRequest& request) {
  if (!request.log) return -1;
  int fd = ::open(request.log->c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0644);
  if (fd < 0) {
    throw Error("--log " + *request.log, "cannot open it: " + errno_text(errno),
                "give a file in a directory you can write");
  }
  return fd;
}

// "the shutdown reserve $0.71 is 71% of the budget $1.00": a budget mostly eaten by the reserve
// stops the run soon after it starts.
void warn_about_reserve(const RunSettings& settings, const Admission& admission,
                        const Reporter& reporter) {
  if (!admission.run_budget || admission.run_budget->micros <= 0) return;
  Money reserve = shutdown_reserve(settings.rate_per_hour, settings.on_trip);
  double share = static_cast<double>(reserve.micros) / admission.run_budget->micros;
  if (share <= 0.5) return;
  const std::string& currency = settings.loaded.policy.currency;
  reporter.line("the shutdown reserve " + format_money(reserve, currency) + " is " +
                std::to_string(static_cast<int>(share * 100 + 0.5)) + "% of the budget " +
                format_money(*admission.run_budget, currency) +
                ": the run trips when little is spent (lower --grace or raise --budget)");
}

// A job key's budget is the latest --budget: raising (or lowering) it is said, never silent.
void say_job_budget_change(const RunSettings& settings, const Admission& admission,
                           const Reporter& reporter) {
  if (settings.job_key.empty() || !settings.budget || !admission.job_budget_before) return;
  const Money before = *admission.job_budget_before;
  if (*settings.budget == before) return;
  const std::string& currency = settings.loaded.policy.currency;
  reporter.line(std::string("--budget ") + format_money(*settings.budget, currency) +
                (before < *settings.budget ? " raises" : " lowers") + " the budget of job " +
                settings.job_key + " from " + format_money(before, currency) +
                " (its earlier runs spent " +
                format_money(admission.job_spent_before.value_or(Money{}), currency) + ")");
}

// Records the final row, or spools it on this host when the ledger does not take it in time.
bool record_final(Supervisor& supervisor, const std::string& ledger_url, const RunOutcome& outcome,
                  const Reporter& reporter) {
  RunFinal final;
  final.id = outcome.run_id;
  final.status = outcome.status;
  final.reason = outcome.reason;
  if (outcome.command_exit_code) {
    final.exit_code = *outcome.command_exit_code;
  } else if (outcome.command_signal) {
    final.exit_code = shell_status(*outcome.command_signal);
  }
  final.spend = outcome.spend;
  final.elapsed_seconds = outcome.elapsed_seconds;
  if (outcome.gpu) final.gpu = to_run_gpu(*outcome.gpu);
  if (outcome.progress) {
    final.metric_name = outcome.progress->metric_name;
    final.metric_value = outcome.progress->metric_value;
    final.units = outcome.progress->units;
    final.egress_gb = outcome.progress->egress_gb;
  }
  final.storage_peak_gb = outcome.storage_peak_gb;
  final.storage_spend = outcome.storage_spend;
  std::string error = supervisor.record_final(final, kFinalRowTimeout);
  if (error.empty()) return true;
  try {
    // A spooled row is checked against the run's last heartbeat when it is replayed, and
    // heartbeats are at the allocated rate: under measured billing the row is spooled at the
    // allocated spend (never less than was reported), giving up the measured discount.
    std::string note;
    if (outcome.gpu && outcome.gpu->allocated_spend &&
        *outcome.gpu->allocated_spend > final.spend) {
      final.spend = *outcome.gpu->allocated_spend;
      note = " (at the allocated spend: measured billing needs the ledger at the end)";
    }
    std::string path = spool_final(ledger_url, final);
    reporter.error("ledger: " + error + "; the final row is spooled in " + path + note +
                   " and replayed by the next spendcap command");
  } catch (const Error& spool_error) {
    reporter.error("ledger: " + error +
                   "; spooling the final row failed too: " + format_error(spool_error));
  }
  return false;
}

// What the webhooks say about the run (notify/payload.hpp).
RunFacts run_facts(const RunSettings& settings, const std::vector<std::string>& command,
                   const std::string& run_id, const Admission& admission) {
  RunFacts facts;
  facts.run_id = run_id;
  facts.team = settings.team;
  facts.experiment = settings.experiment;
  facts.project = settings.project;
  facts.user = settings.user;
  facts.host = settings.host;
  facts.tags = settings.tags;
  facts.command = command;
  facts.currency = settings.loaded.policy.currency;
  facts.budget = admission.run_budget ? admission.run_budget : settings.budget;
  facts.rate_per_hour = settings.rate_per_hour;
  return facts;
}

// The crash-loop guard, before admission: 0 to go on (after the back-off wait, with
// --retry-backoff), else the exit status of the refusal (120), recorded as a refused row.
int check_crash_loop(const RunRequest& request, const RunSettings& settings, RunStart& start,
                     Ledger& ledger, std::vector<WebhookTarget>& webhooks, const Environment& env,
                     const Reporter& reporter) {
  CrashLoopGuard guard = settings.loaded.policy.guards.crash_loop.value_or(CrashLoopGuard{});
  if (!guard.enabled) return 0;
  CommandHistory history = ledger.command_history(start.fingerprint, to_seconds(guard.window));
  std::vector<PastRun> past;
  for (const RunView& run : history.runs) {
    PastRun p;
    p.started_at = run.started_at;
    p.finished_at = run.finished_at;
    switch (run.status) {
      case RunStatus::running:
        p.ended = PastRun::Ended::running;
        break;
      case RunStatus::succeeded:
        p.ended = PastRun::Ended::succeeded;
        break;
      case RunStatus::failed:
        // A run spendcap could not launch failed by no fault of the command.
        p.ended = run.reason == "not launched" ? PastRun::Ended::other : PastRun::Ended::failed;
        break;
      default:
        p.ended = PastRun::Ended::other;
    }
    p.crash_loop_refusal =
        run.status == RunStatus::refused && run.reason.find(kCrashLoopReason) != std::string::npos;
    p.cleared = run.tags.count(kCrashLoopClearedTag) > 0;
    past.push_back(p);
  }
  CrashLoopVerdict verdict =
      decide_crash_loop(past, history.now, guard.max_failures, guard.window, request.retry_backoff);
  if (request.clear_crash_loop) {
    if (verdict.failures == 0) {
      reporter.line("--clear-crash-loop: no failures of this command to clear; starting as usual");
      return 0;
    }
    // The failures' own user, a member of the team's budget, or the ledger's owner: not anyone
    // who happens to run the same command line.
    bool own = std::any_of(history.runs.begin(), history.runs.end(), [](const RunView& run) {
      return run.status == RunStatus::failed && run.user == user_name();
    });
    if (!own && !ledger.caller_is_owner()) {
      if (settings.team.empty()) {
        throw Error("--clear-crash-loop", "the failures are another user's and the run has no team",
                    "ask their user or the ledger's owner to clear it");
      }
      require_membership(ledger, {Scope{ScopeKind::team, settings.team}},
                         "clear the crash loop of its runs");
    }
    std::string by = user_name() + "@" + host_name();
    start.tags[kCrashLoopClearedTag] = by;
    reporter.line("crash-loop guard cleared by " + by + " (" + std::to_string(verdict.failures) +
                  " failures; the ledger keeps it as this run's tag " + kCrashLoopClearedTag +
                  "): starting");
    return 0;
  }
  if (verdict.refuse) {
    ledger.record_refused(start, std::string("refused: ") + kCrashLoopReason);
    // The `refused` event goes out once per window (verdict.send_refused_event): a job knocking
    // again and again does not flood the channel.
    Admission refused;
    refused.refusal =
        verdict.message + (verdict.send_refused_event ? "" : " (refused before in this window)");
    refused.run_budget = settings.budget;
    if (verdict.send_refused_event && !webhooks.empty()) {
      RunFacts facts = run_facts(settings, request.command, start.id, refused);
      auto notifier = make_run_notifier(std::move(webhooks), facts, ledger, env, reporter);
      notifier->start();
      notifier->notify(RunEvent{"refused", kCrashLoopReason, "", "refused: " + verdict.message,
                                std::nullopt, to_int(ExitCode::refused), true});
      finish_run_notifier(*notifier, ledger, facts, true, reporter);
    }
    return refuse(request, settings, start.id, refused, reporter);
  }
  if (verdict.backoff > Nanos{}) {
    reporter.line(verdict.message);
    // The stop signals are blocked: the wait ends early on one, and spendcap dies by it.
    sigset_t stops;
    sigemptyset(&stops);
    for (int signal : kStopSignals) sigaddset(&stops, signal);
    auto seconds = std::chrono::duration_cast<std::chrono::seconds>(verdict.backoff);
    timespec wait{static_cast<time_t>(seconds.count()),
                  static_cast<long>((verdict.backoff - seconds).count())};
    int signal = 0;
    while ((signal = ::sigtimedwait(&stops, nullptr, &wait)) < 0 && errno == EINTR) {
    }
    if (signal > 0) reraise(signal);
  }
  return 0;
}

// The guards that watch the run, from the flags and the policy.
GuardPlan make_guard_plan(const RunRequest& request, const RunSettings& settings,
                          const RunDir& run_dir) {
  const Policy& policy = settings.loaded.policy;
  GuardPlan plan;
  plan.progress_path = run_dir.progress();
  plan.require_fit = request.require_fit;
  if (policy.guards.stall) plan.stall_after = policy.guards.stall->after;
  // The burn-rate guard: on where the experiment's budget says what it expects per hour.
  auto experiments = policy.budgets.find(ScopeKind::experiment);
  if (!settings.experiment.empty() && experiments != policy.budgets.end()) {
    auto spec = experiments->second.find(settings.experiment);
    if (spec != experiments->second.end() && spec->second.expected_per_hour) {
      BurnRateCheck check;
      check.factor = policy.guards.burn_rate.value_or(BurnRateGuard{}).factor;
      check.expected_per_hour = *spec->second.expected_per_hour;
      check.experiment = settings.experiment;
      plan.burn_rate = check;
    }
  }
  return plan;
}

}  // namespace

namespace {

// --status-file is checked before anything runs, so that a path it cannot write fails the run at
// once (125) instead of after the job.
void check_status_file_path(const std::string& path) {
  std::string flag = "--status-file " + path;
  if (path.empty()) throw Error("--status-file", "empty path", "give a file path");
  std::string directory = std::filesystem::path(path).parent_path().string();
  if (directory.empty()) directory = ".";
  struct stat status {};
  if (::stat(directory.c_str(), &status) != 0) {
    throw Error(flag, "its directory " + directory + ": " + errno_text(errno),
                "create the directory, or give another path");
  }
  if (!S_ISDIR(status.st_mode)) {
    throw Error(flag, directory + " is not a directory", "give a path in a directory");
  }
  // The file is written as a temporary file in the directory, then renamed over the path.
  if (access_as_user(directory.c_str(), W_OK | X_OK) != 0) {
    throw Error(flag, "cannot write in " + directory + ": " + errno_text(errno),
                "give a path in a directory you can write");
  }
  if (::stat(path.c_str(), &status) == 0 && S_ISDIR(status.st_mode)) {
    throw Error(flag, "is a directory", "give a file path");
  }
}

// --checkpoint-dir and --checkpoint-max-gb, checked before anything runs: the maximum's storage
// price joins the burn rate, so reserves, claims, ceilings and the trip count on it, and the meter
// (which charges the sampled size, never more than the maximum) cannot end the run over budget.
// Without a maximum the trip could not foresee the storage, so the two go together.
StoragePlan checkpoint_storage(const RunRequest& request, RunSettings& settings) {
  StoragePlan plan;
  if (!request.checkpoint_dir && !request.checkpoint_max_gb) return plan;
  if (!request.checkpoint_dir) {
    throw Error("--checkpoint-max-gb " + *request.checkpoint_max_gb,
                "a maximum without a directory", "give --checkpoint-dir DIR too");
  }
  std::string flag = "--checkpoint-dir " + *request.checkpoint_dir;
  if (!request.checkpoint_max_gb) {
    throw Error(flag,
                "needs --checkpoint-max-gb: the budget reserves for the most the directory may "
                "hold, so that storage never takes a run over its budget",
                "give --checkpoint-max-gb GB");
  }
  const std::string& max_text = *request.checkpoint_max_gb;
  char* end = nullptr;
  double max_gb = std::strtod(max_text.c_str(), &end);
  if (max_text.empty() || *end != '\0' || !std::isfinite(max_gb) || max_gb <= 0 || max_gb > 1e9) {
    throw Error("--checkpoint-max-gb " + max_text, "not a size in GB above 0",
                "give a number such as 50 or 0.5");
  }
  const auto& price = settings.loaded.policy.storage_per_gb_month;
  if (!price) {
    throw Error(flag, "the policy prices no storage",
                "set rates.storage_per_gb_month in the policy");
  }
  struct stat st {};
  if (request.checkpoint_dir->empty() || ::lstat(request.checkpoint_dir->c_str(), &st) != 0 ||
      !S_ISDIR(st.st_mode)) {
    throw Error(flag, "not an existing directory (a link is not followed)",
                "create it first, or give the directory the job writes its checkpoints to");
  }
  plan.dir = *request.checkpoint_dir;
  plan.max_gb = max_gb;
  plan.per_gb_month = *price;
  plan.rate_per_hour = storage_rate_per_hour(*price, max_gb);
  if (plan.rate_per_hour > kMaxMoney || settings.rate_per_hour > kMaxMoney - plan.rate_per_hour) {
    throw Error("--checkpoint-max-gb " + max_text,
                "the storage rate is beyond the largest amount spendcap handles",
                "check --checkpoint-max-gb and rates.storage_per_gb_month");
  }
  settings.rate_per_hour += plan.rate_per_hour;
  settings.rate_source += " + storage up to " + max_text + " GB";
  require_money_fits(request, settings);
  return plan;
}

// --metrics-dir (or metrics_dir) is checked before anything runs: an existing directory spendcap
// can write in (node_exporter's textfile directory is made by whoever runs node_exporter).
void check_metrics_dir(const std::string& dir) {
  std::string flag = "--metrics-dir " + dir;
  if (dir.empty()) throw Error("--metrics-dir", "empty path", "give a directory");
  struct stat status {};
  if (::stat(dir.c_str(), &status) != 0) {
    throw Error(flag, errno_text(errno), "create the directory, or give another one");
  }
  if (!S_ISDIR(status.st_mode)) throw Error(flag, "is not a directory", "give a directory");
  // On the setgid install the runner's metrics writer checks it with the group (below).
  if (!installed_setgid() && access_as_user(dir.c_str(), W_OK | X_OK) != 0) {
    throw Error(flag, "cannot write in it: " + errno_text(errno), "give a directory you can write");
  }
}

// The steps of run_command; an Error thrown by one unwinds (the run directory, an admitted run)
// before run_command looks for a stop signal that came meanwhile.
int run_steps(const RunRequest& request, const Inherited& inherited) {
  if (request.status_file) check_status_file_path(*request.status_file);
  // No stop signal may kill spendcap half-way (a run admitted but never launched): they stay
  // blocked until the supervisor's event loop handles them. The command gets the caller's mask.
  block_stop_signals(true);
  for (int signal : kIgnoredBySupervisor) ::signal(signal, SIG_IGN);
  Reporter reporter(request.quiet, request.title, open_log(request));
  // Under the privileged runner: the front's environment (the job's), not the runner's own.
  const RunnerRun* runner = runner_run();
  Environment env = runner ? runner->environment : current_environment();
  refuse_redirecting_environment(env);
  TestSwitches switches = TestSwitches::from(env);
  RunSettings settings =
      resolve_run_settings(request, env, PolicySearch::from_environment(request.policy));
  require_locked_policy_when_setgid(settings.loaded.locked, settings.ledger_url);
  if (settings.loaded.policy.metrics_dir) {
    check_metrics_dir(*settings.loaded.policy.metrics_dir);
    check_shared_metrics_dir(*settings.loaded.policy.metrics_dir, settings.loaded.locked);
  }
  StoragePlan storage = checkpoint_storage(request, settings);
  if (switches.storage_every_second) storage.interval = std::chrono::seconds(1);
  if (switches.any()) {
    if (settings.loaded.locked) {
      throw Error("SPENDCAP_TEST_SWITCHES",
                  "test-only switches are refused under the locked policy " +
                      settings.loaded.locked_source);
    }
    reporter.error("test-only switches in effect: " + env.at("SPENDCAP_TEST_SWITCHES"));
  }
  // 127 and 126 before anything is written to the ledger.
  auto path = env.find("PATH");
  std::string executable =
      resolve_executable(request.command.front(), path == env.end() ? "" : path->second);
  std::string run_id = new_run_id();
  RunDir run_dir(env, run_id);
  // Webhook variables and URLs are checked before anything is written to the ledger.
  std::vector<WebhookTarget> webhooks = run_webhook_targets(
      settings.loaded.policy, settings.webhook_urls, env, settings.loaded.locked_policy);

  // Metrics on the setgid install: the writer keeps the group the ledger's open drops for good.
  std::shared_ptr<MetricsSink> metrics_sink;
  if (settings.loaded.policy.metrics_dir && installed_setgid()) {
    metrics_sink = start_runner_metrics_writer(*settings.loaded.policy.metrics_dir);
  }

  std::shared_ptr<Ledger> ledger = open_run_ledger(settings, switches, reporter);
  require_estimate_fits(request, settings, *ledger);  // --estimate-steps (report_commands.hpp)
  require_membership(*ledger, named_scopes(settings), "charge runs to it");
  RunStart start = make_run_start(settings, request.command, run_id);
  start.webhooks = lost_event_webhooks(webhooks);  // lost_runs.hpp
  if (int code = check_crash_loop(request, settings, start, *ledger, webhooks, env, reporter))
    return code;
  Admission admission = ledger->begin_run(start);
  // Its admission reconciled what was due: their lost events are queued (lost_runs.hpp).
  tell_lost_runs(*ledger, settings.loaded.policy.currency);
  RunFacts facts = run_facts(settings, request.command, run_id, admission);
  if (!admission.admitted) {
    if (!webhooks.empty()) {
      auto notifier = make_run_notifier(std::move(webhooks), facts, *ledger, env, reporter);
      notifier->start();
      notifier->notify(RunEvent{"refused", admission.refusal,
                                admission.refused_by ? to_string(*admission.refused_by) : "",
                                "refused: " + admission.refusal, std::nullopt,
                                to_int(ExitCode::refused), true});
      finish_run_notifier(*notifier, *ledger, facts, true, reporter);
    }
    return refuse(request, settings, run_id, admission, reporter);
  }
  AdmittedRun admitted(*ledger, run_id);
  warn_about_reserve(settings, admission, reporter);
  say_job_budget_change(settings, admission, reporter);
  if (admission.lowered_by && settings.budget) {
    reporter.line("--budget " + format_money(*settings.budget, settings.loaded.policy.currency) +
                  " lowered to " +
                  format_money(*admission.run_budget, settings.loaded.policy.currency) +
                  ", the max_run of " + to_string(*admission.lowered_by));
  }

  // Everything the guard needs is decided before it is forked.
  std::optional<Cgroup> cgroup;
  if (runner) {
    cgroup = runner->cgroup;  // made by the runner as root; the keeper removes it
  } else if (!switches.no_cgroup) {
    std::string why_not;
    cgroup = Cgroup::create("spendcap-" + run_id, &why_not);
  }
  LaunchSpec spec = make_launch_spec(request, executable, settings, env, inherited, run_id,
                                     admission, run_dir, cgroup ? cgroup->path() : "");

  // Orphans of the tree re-parent to the guard; should the guard die, to spendcap.
  if (!switches.no_subreaper) ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  GuardOptions guard_options;
  guard_options.subreaper = !switches.no_subreaper;
  guard_options.run_dir = run_dir.path();
  const Cgroup* cgroup_ptr = cgroup ? &*cgroup : nullptr;
  guard_options.pid_namespace = settings.isolation != Isolation::none;
  guard_options.pid_namespace_required = settings.isolation == Isolation::pid;
  // Ticks come every interval; three missed (and never under 2 s: a loaded host delays timers)
  // mean the supervisor is stopped or hung.
  guard_options.stale_after = std::max<Nanos>(3 * settings.interval, std::chrono::seconds(2));
  // libcurl is loaded here (before the guard is forked) only when there is something to deliver.
  facts.started_at = unix_now();
  std::unique_ptr<WebhookNotifier> notifier =
      make_run_notifier(std::move(webhooks), facts, *ledger, env, reporter);
  GuardHandle guard = start_guard(spec, cgroup_ptr, guard_options);
  if (!guard.isolated && !guard.why_not_isolated.empty()) {
    reporter.error("isolation: no PID namespace here (" + guard.why_not_isolated +
                   "); the job runs without isolation");
  }
  admitted.launched();  // from here the supervisor's outcome is the run's final row
  // On a pipe a line needs no newline first while the job has written nothing since the last.
  reporter.set_job_write_count([pid = guard.pid] { return write_count_of_tree(pid); });
  reporter.write_in_background();
  if (notifier) notifier->start();  // its thread only once the guard is forked

  SupervisorPlan plan = make_plan(settings, run_id, admission, run_dir, spec.take_terminal);
  plan.isolation = guard.isolated ? "pid namespace" : "none: the job can signal spendcap";
  if (runner) {
    plan.isolation += "; supervisor and guard run as " + runner->service_user +
                      " (privileged runner: the user cannot signal, stop or ptrace them)";
  }
  plan.ledger = ledger->url();
  plan.guards = make_guard_plan(request, settings, run_dir);
  RespawnLoopGuard respawn =
      settings.loaded.policy.guards.respawn_loop.value_or(RespawnLoopGuard{});
  if (respawn.enabled) {
    plan.guards.respawn = RespawnPlan{respawn.max_restarts, respawn.window, respawn.min_life,
                                      !switches.no_proc_connector};
  }
  plan.make_tree = [cgroup_ptr](pid_t root) -> std::unique_ptr<ProcessTree> {
    return std::make_unique<LiveProcessTree>(root, cgroup_ptr);
  };
  plan.notifier = notifier.get();
  plan.gpu = make_gpu_plan(settings.loaded.policy, env);
  // --gpus N (with --gpu): how many GPUs the run holds, even where no variable names them.
  if (auto gpus = settings.tags.find("gpus"); gpus != settings.tags.end()) {
    plan.gpu.allocation.count = std::stoi(gpus->second);
  }
  if (settings.loaded.policy.metrics_dir) {
    plan.metrics = MetricsPlan{*settings.loaded.policy.metrics_dir, settings.team,
                               settings.experiment, metrics_sink};
  }
  plan.gpu.measured_billing = settings.loaded.policy.defaults.billing == Billing::measured;
  plan.gpu.gpu_rate_per_hour = settings.gpu_rate_per_hour;
  plan.storage = storage;
  Supervisor supervisor(std::move(plan), guard, reporter, ledger);
  RunOutcome outcome = supervisor.run();
  outcome.tree_tracking = cgroup ? "cgroup" : "parentage";
  outcome.isolation = guard.isolated ? "pid" : "none";
  // A stop signal that came after the tree was empty: the job is done, spendcap still dies by it.
  if (!outcome.reraise_signal) {
    if (int signal = take_pending_stop_signal()) {
      outcome.spendcap_signal = outcome.reraise_signal = signal;
      outcome.exit_code = shell_status(signal);
    }
  }

  bool recorded = record_final(supervisor, ledger->url(), outcome, reporter);
  write_status(request, outcome, reporter);
  run_dir.remove();
  if (cgroup) cgroup->remove();
  // The webhooks get at most their deadline; what is left waits in the outbox.
  if (notifier) finish_run_notifier(*notifier, *ledger, facts, recorded, reporter);
  std::string summary = summary_line(outcome);
  if (admission.job_spent_before) {
    // A job key's budget spans its runs: its total is what the user compares with it.
    summary +=
        "; job " + settings.job_key + " total " +
        format_money(*admission.job_spent_before + outcome.spend, outcome.currency) +
        (admission.run_budget ? " of " + format_money(*admission.run_budget, outcome.currency)
                              : std::string());
  }
  reporter.line(summary);
  if (outcome.gpu) {
    // One reporter line per line: the reporter escapes a newline inside a line.
    std::string text = gpu_report_line(*outcome.gpu, outcome.currency);
    for (std::size_t at = 0; at <= text.size();) {
      std::size_t end = std::min(text.find('\n', at), text.size());
      if (end > at) reporter.line(text.substr(at, end - at));
      at = end + 1;
    }
  }
  int signal = outcome.reraise_signal ? outcome.reraise_signal : take_pending_stop_signal();
  if (signal) {
    reporter.flush();
    reraise(signal);
  }
  return outcome.exit_code;
}

}  // namespace

void write_error_status(const std::string& path, const Error& error) {
  RunOutcome outcome;
  outcome.status = RunStatus::failed;
  outcome.exit_code = to_int(error.code());
  switch (error.code()) {
    case ExitCode::not_found:
      outcome.reason = "command-not-found";
      break;
    case ExitCode::not_executable:
      outcome.reason = "command-not-executable";
      break;
    default:
      outcome.reason = "spendcap-error";
  }
  outcome.message = format_error(error);
  nlohmann::json json = to_json(outcome);
  json["run_id"] = nullptr;
  json["currency"] = nullptr;
  json["rate_per_hour"] = nullptr;
  json["elapsed_seconds"] = nullptr;
  try {
    write_file_atomically(path, plain_json_numbers(dump_json(json, 2)) + "\n", 0644,
                          "--status-file " + path);
  } catch (const Error& write_error) {
    std::cerr << "spendcap: " << escape_for_terminal(format_error(write_error)) << "\n";
  }
}

int run_command(const RunRequest& request, const Inherited& inherited) {
  try {
    return run_steps(request, inherited);
  } catch (const Error& error) {
    // Every outcome leaves a trace: 125, 126 and 127 too (not where the path itself was refused).
    if (request.status_file && !error.subject().starts_with("--status-file")) {
      write_error_status(*request.status_file, error);
    }
    // Setup gives up at once when a stop signal comes while it waits (a locked ledger): spendcap
    // dies by that signal, as it would have without the block, once it has said why.
    if (int signal = take_pending_stop_signal()) {
      std::cerr << "spendcap: " << escape_for_terminal(format_error(error)) << "\n";
      reraise(signal);
    }
    throw;
  }
}

}  // namespace spendcap
