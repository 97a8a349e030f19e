#include "spendcap/run/settings.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "spendcap/base/acting_user.hpp"
#include "spendcap/base/signals.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/ledger/backends.hpp"
#include "spendcap/ledger/stop_rule.hpp"
#include "spendcap/policy/keys.hpp"
#include "spendcap/run/estimate_fit.hpp"
#include "spendcap/run/input_limits.hpp"
#include "spendcap/run/ledger_group.hpp"
#include "spendcap/run/multi_node.hpp"
#include "spendcap/run/run_defaults.hpp"
#include "spendcap/spend/meter.hpp"
#include "spendcap/supervise/run_env.hpp"
#include "spendcap/supervise/signal_forward.hpp"

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
// A rate given as such (--rate, $SPENDCAP_RATE, the policy's defaults.rate) wins over the policy's
// GPU and instance types, unless a flag or variable named one of those (run_defaults.hpp).
void resolve_rate(const RunRequest& request, const Environment& env, RunSettings& settings) {
  const Policy& policy = settings.loaded.policy;
  std::optional<std::string> given_rate = request.rate;
  std::string rate_from = given_rate ? settings.term_sources["rate"] : "";
  // A locked policy may price its runner by a rate of its own (a layer can only repeat it).
  bool locked_rate = false;
  if (!given_rate && !request.gpu && !request.instance && policy.defaults.rate) {
    locked_rate = settings.loaded.locked_policy && settings.loaded.locked_policy->defaults.rate;
    given_rate = to_decimal(*policy.defaults.rate);
    rate_from = policy_source_of(settings.loaded, "/defaults/rate");
    settings.term_sources["rate"] = rate_from;
  }
  if (rate_from.empty()) rate_from = "--rate";
  if (given_rate) {
    if (settings.loaded.locked && !locked_rate) {
      throw Error(rate_from + " " + *given_rate,
                  "the locked policy " + settings.loaded.locked_source + " sets the rates",
                  "give --gpu / --instance types it prices instead");
    }
    settings.rate_per_hour = parse_money_or_throw(*given_rate, rate_from);
    settings.rate_source = rate_from;
    if (settings.rate_per_hour.micros == 0) {
      throw Error(rate_from + " " + *given_rate, "a run needs a burn rate above 0",
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
    settings.identity.tags["gpu"] = *d.gpu;
    settings.identity.tags["gpus"] = std::to_string(gpus);
  }
  if (d.instance) {
    per_instance +=
        price_of(policy.instance_rates, *d.instance, d.pricing, "--instance", "instance");
    source += (source.empty() ? "" : " + ") + *d.instance;
    settings.identity.tags["instance"] = *d.instance;
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
  for (const Scope& scope : named_scopes(settings.identity)) {
    auto named = budgets.find(scope.kind);
    if (named != budgets.end() && named->second.count(scope.name)) return;
  }
  // Only the budgets this user may charge runs to: one that names its members is suggested to
  // them alone (the ledger checks membership again at admission).
  Caller caller = current_caller();
  auto may_charge = [&](const BudgetSpec& spec) {
    if (spec.member_groups.empty()) return true;
    return std::any_of(spec.member_groups.begin(), spec.member_groups.end(),
                       [&](const std::string& group) { return caller.in_group(group); });
  };
  std::vector<std::string> choices;
  for (const auto& [kind, named] : budgets) {
    std::vector<std::string> names;
    for (const auto& [budget_name, spec] : named) {
      if (may_charge(spec)) names.push_back(budget_name);
    }
    if (!names.empty()) choices.push_back("--" + to_string(kind) + " " + join(names, "|"));
  }
  throw Error("run",
              "the locked policy " + settings.loaded.locked_source +
                  " charges every run to one of its budgets, and this run matches none",
              choices.empty() ? "you are a member of none of its budgets: ask the runner's "
                                "owner to add you to a team"
                              : "give " + join(choices, " or "));
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

// --estimate-steps and --step-time, parsed; none without them, 125 with one alone.
std::optional<StepEstimateFlags> estimate_flags(const RunRequest& request) {
  if (!request.estimate_steps && !request.step_time) return std::nullopt;
  if (!request.estimate_steps || !request.step_time) {
    throw usage_error(request.estimate_steps ? "--estimate-steps" : "--step-time",
                      "--estimate-steps and --step-time go together",
                      "e.g. --estimate-steps 50000 --step-time 0.8s");
  }
  return StepEstimateFlags{parse_number(*request.estimate_steps, "--estimate-steps"),
                           seconds_of(*request.step_time, "--step-time"),
                           "--estimate-steps " + *request.estimate_steps};
}

}  // namespace

RunSettings resolve_run_settings(const RunRequest& typed, const Environment& env,
                                 const PolicySearch& search) {
  RunSettings settings;
  // Flags first, then $SPENDCAP_* variables, then the policy's defaults (run_defaults.hpp).
  RunRequest request = with_environment_defaults(typed, env, settings.term_sources);
  if (request.command.empty()) {
    throw Error("run", "no command given",
                "give the command after --, e.g. spendcap run --rate 36 --budget 10 -- python3 "
                "train.py");
  }
  require_within_input_limits(request);
  require_printable_name(request.team, "--team");
  require_printable_name(request.experiment, "--experiment");
  require_printable_name(request.project, "--project");
  settings.loaded = load_policy_naming_flags(search, flags_layer(request));
  const Policy& policy = settings.loaded.policy;
  apply_policy_defaults(request, settings.loaded, settings.term_sources);

  if (request.budget) settings.budget = parse_money_or_throw(*request.budget, "--budget");
  for (const std::string& tag : request.tags) {
    size_t eq = tag.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw Error("--tag " + tag, "not KEY=VALUE", "write it like --tag lr=3e-4");
    }
    require_printable_name(tag.substr(0, eq), "--tag");
    settings.identity.tags[tag.substr(0, eq)] = tag.substr(eq + 1);
  }
  for (const auto& [key, value] : bounded_tags(scheduler_tags(env)))
    settings.identity.tags.try_emplace(key, value);
  // The tracker's run id, for `show`, `report --by tracker`, FOCUS and webhooks (--tag
  // tracker=... wins).
  if (auto tracker = tracker_from_environment(env)) {
    settings.identity.tags.try_emplace("tracker", *tracker);
  }
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
  settings.identity.id = new_run_id();
  settings.identity.team = request.team;
  settings.identity.experiment = request.experiment;
  settings.identity.project = request.project;
  settings.identity.job_key = request.job_key;
  settings.identity.command = request.command;
  if (request.exit_window) {
    settings.exit_window = parse_duration_or_throw(*request.exit_window, "--exit-window");
  }
  for (const std::string& name : request.forward) {
    settings.forward_signals.push_back(forwardable_signal_or_throw(name));
  }
  settings.identity.user = user_name();
  settings.identity.host = host_name();
  if (auto joined = resolve_multi_node_run(request.run_id, settings.identity.job_key, env,
                                           settings.identity.host)) {
    // One run over many wrappers: its id is their job key, and each row says its node.
    settings.identity.job_key = joined->id;
    settings.identity.tags["node"] = joined->node;
    settings.node = joined->node;
  }
  settings.webhook_urls = request.webhook_urls;
  settings.status_file = request.status_file;
  settings.estimate = estimate_flags(request);
  settings.verbose = request.verbose;
  settings.require_fit = request.require_fit;
  settings.retry_backoff = request.retry_backoff;
  settings.clear_crash_loop = request.clear_crash_loop;
  require_a_locked_budget(settings);
  resolve_spot_notice(request, env, settings);
  return settings;
}

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

void require_runner_metrics_dir(const LoadedPolicy& loaded) {
  if (!installed_setgid() || !loaded.policy.metrics_dir) return;
  std::optional<std::string> locked;
  if (loaded.locked_policy) locked = loaded.locked_policy->metrics_dir;
  if (loaded.policy.metrics_dir == locked) return;
  throw Error("--metrics-dir " + *loaded.policy.metrics_dir,
              "refused on this shared runner: only the locked policy's metrics_dir (" +
                  (locked ? *locked : std::string("none")) +
                  ") is written, by a writer that holds the ledger's group, so a directory you "
                  "name would get files of the runner's",
              "drop --metrics-dir and metrics_dir from your own policy files");
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

}  // namespace spendcap
