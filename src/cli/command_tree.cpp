// The command line's shared pieces (command_tree.hpp), moved verbatim from main.cpp.
#include "spendcap/cli/command_tree.hpp"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <unordered_map>

namespace spendcap {

namespace {

// "50k" -> "50000", "1.5M" -> "1500000", "7B" -> "7000000000", "1T" -> "1000000000000": counts
// as people write them (K, M, B or G, T).
// Anything else is passed on unchanged, for the command's own check to judge.
std::string expand_count_suffix(std::string text) {
  if (text.size() < 2) return text;
  double factor = 0;
  switch (text.back()) {
    case 'k':
    case 'K':
      factor = 1e3;
      break;
    case 'M':
      factor = 1e6;
      break;
    case 'B':
    case 'G':
      factor = 1e9;
      break;
    case 'T':
      factor = 1e12;
      break;
    default:
      return text;
  }
  std::string number = text.substr(0, text.size() - 1);
  char* end = nullptr;
  double value = std::strtod(number.c_str(), &end);
  if (end == number.c_str() || *end != '\0' || !(value >= 0) || value > 1e15 ||
      number.find_first_of("eExXpP") != std::string::npos) {
    return text;
  }
  char expanded[48];
  std::snprintf(expanded, sizeof expanded, "%.0f", value * factor);
  return expanded;
}

}  // namespace

void add_run_options(CLI::App& run, RunRequest& request) {
  run.add_option("--team", request.team, "the team the run is charged to");
  run.add_option("--experiment", request.experiment, "the experiment it belongs to");
  run.add_option("--project", request.project, "the project it belongs to");
  run.add_option("--tag", request.tags,
                 "a free tag KEY=VALUE (repeatable; at most 32, KEY 64 and VALUE 256 bytes)");
  run.add_option("--job-key", request.job_key,
                 "one job across restarts: --budget is shared by every run with this key");
  run.add_option("--run-id", request.run_id,
                 "join a multi-node run (one wrapper per node): its --budget holds across all of "
                 "them and `stop --job ID` stops all; slurm: slurm-JOBID.STEPID");
  run.add_option("--rate", request.rate, "burn rate in USD per hour (instead of --gpu/--instance)");
  run.add_option("--budget", request.budget, "the most this run (or job key) may spend, in USD");
  run.add_option("--gpu", request.gpu, "GPU type, priced by the policy (e.g. a100-80gb)");
  run.add_option("--gpus", request.gpus,
                 "GPUs per instance (default: CUDA_VISIBLE_DEVICES or Slurm's, else 1)");
  run.add_option("--instance", request.instance, "instance type, priced by the policy");
  run.add_option("--instances", request.instances, "number of instances (default 1)");
  run.add_option("--pricing", request.pricing, "on-demand, spot or reserved");
  run.add_option("--billing", request.billing,
                 "allocated (default): rate x wall time; measured: the GPU part by busy GPU time");
  run.add_option("--mode", request.mode, "enforce, or warn: stop nothing, report what would stop");
  run.add_option("--checkpoint-signal", request.checkpoint_signal,
                 "signal asking the job to checkpoint (default SIGUSR1), or none");
  run.add_option("--grace", request.grace, "time to checkpoint after the signal (default 60s)");
  run.add_option("--kill-after", request.kill_after, "time from SIGTERM to SIGKILL (default 10s)");
  run.add_option("--interval", request.interval, "refresh of live figures (default 1s)");
  run.add_option("--sync", request.sync, "ledger heartbeat interval (default 5s)");
  run.add_option("--claim-horizon", request.claim_horizon,
                 "how far ahead a ceiling is claimed from shared budgets, within a fair share of "
                 "what is left (default 5m)");
  run.add_option(
      "--isolation", request.isolation,
      "pid (default where the kernel allows it: the job cannot signal spendcap) or none");
  run.add_option("--stall-after", request.stall_after,
                 "stop the run (123) when no progress line came for this long");
  run.add_flag("--require-fit", request.require_fit,
               "stop the run (123) when its projected total exceeds its budget");
  run.add_flag("--retry-backoff", request.retry_backoff,
               "after recent failures of the same command, wait 10s doubling (max 5m) first");
  run.add_flag("--clear-crash-loop", request.clear_crash_loop,
               "the command is fixed: start it although the crash-loop guard would refuse it "
               "(its failures' user, a team member or the ledger's owner; kept in the ledger)");
  run.add_flag("--dry-run", request.dry_run,
               "print the terms, where each came from, and the admission verdict; start nothing");
  run.add_option("--status-file", request.status_file, "write the outcome here as JSON");
  run.add_option("--metrics-dir", request.metrics_dir,
                 "write the run's spend as a Prometheus textfile here (node_exporter)");
  run.add_option("--checkpoint-dir", request.checkpoint_dir,
                 "charge this directory's size at the policy's storage price per GB-month");
  run.add_option("--checkpoint-max-gb", request.checkpoint_max_gb,
                 "the most --checkpoint-dir may hold: counted in the run's allocated rate");
  run.add_option("--policy", request.policy,
                 "policy file (default: the search order in spendcap-policy(5))");
  run.add_option("--ledger", request.ledger, "ledger: sqlite:PATH, a path or postgresql://...");
  run.add_option("--webhook-env", request.webhook_envs,
                 "a webhook whose URL is in this environment variable (repeatable)");
  run.add_option("--webhook", request.webhook_urls,
                 "a webhook URL (repeatable; any user's ps shows it: prefer --webhook-env)");
  run.add_flag("--quiet,-q", request.quiet, "print errors only");
  run.add_flag("--verbose", request.verbose,
               "start line in full (reserve, isolation, ledger) and the guards' detectors");
  run.add_flag("--title", request.title, "show live spend in the terminal title");
  run.add_option("--spot-notice", request.spot_notice,
                 "aws, gcp or an http:// URL: poll for a spot termination notice; one stops the "
                 "run as preempted (exit 122)");
  run.add_option("--spot-notice-url", request.spot_notice_url,
                 "metadata server for --spot-notice aws|gcp (default http://169.254.169.254; "
                 "env SPENDCAP_SPOT_METADATA_URL)");
  run.add_option("--log", request.log, "write spendcap's own lines to this file (appended)");
  run.add_option("--exit-window", request.exit_window,
                 "after the checkpoint is written, time the job has to exit before SIGTERM "
                 "(default 5s, within the grace)");
  run.add_option("--forward", request.forward,
                 "pass this signal to spendcap on to the job's processes that catch it, as "
                 "SIGUSR1 and SIGUSR2 are (repeatable)");
  run.add_option("--estimate-steps", request.estimate_steps,
                 "refuse the run unless STEPS x --step-time fits its budgets");
  run.add_option("--step-time", request.step_time, "time per step, for --estimate-steps");
  // Not required here: run says what to do when it is missing (give the command after --).
  run.add_option("command", request.command, "the command and its arguments, after --");
  run.positionals_at_end();
}

void accept_count_suffixes(CLI::App& command, const char* name) {
  if (CLI::Option* option = command.get_option_no_throw(name)) {
    option->transform([](std::string text) { return expand_count_suffix(std::move(text)); }, "",
                      "k/M/B");
  }
}

// Typed hints in --help ("--rate USD_PER_HOUR", not "TEXT"), set by name so that a flag added
// anywhere gets its hint here; a flag not listed keeps CLI11's.
void name_option_types(CLI::App& command) {
  static const std::unordered_map<std::string_view, const char*> kHints = {
      {"--team", "TEAM"},
      {"--experiment", "EXPERIMENT"},
      {"--project", "PROJECT"},
      {"--user", "USER"},
      {"--run", "RUN_ID"},
      {"--tag", "KEY=VALUE"},
      {"--job-key", "KEY"},
      {"--job", "KEY"},
      {"--run-id", "ID|slurm"},
      {"--rate", "USD_PER_HOUR"},
      {"--budget", "USD"},
      {"--gpu", "GPU_TYPE"},
      {"--gpus", "COUNT"},
      {"--instance", "INSTANCE_TYPE"},
      {"--instances", "COUNT"},
      {"--pricing", "on-demand|spot|reserved"},
      {"--billing", "allocated|measured"},
      {"--mode", "enforce|warn"},
      {"--checkpoint-signal", "SIGNAL|none"},
      {"--grace", "DURATION"},
      {"--kill-after", "DURATION"},
      {"--interval", "DURATION"},
      {"--sync", "DURATION"},
      {"--claim-horizon", "DURATION"},
      {"--isolation", "pid|none"},
      {"--status-file", "FILE"},
      {"--policy", "FILE"},
      {"--ledger", "sqlite:PATH|PATH|postgresql://..."},
      {"--stall-after", "DURATION"},
      {"--webhook-env", "VARIABLE"},
      {"--webhook", "URL"},
      {"--spot-notice", "aws|gcp|URL"},
      {"--spot-notice-url", "URL"},
      {"--log", "FILE"},
      {"--metrics-dir", "DIR"},
      {"--checkpoint-dir", "DIR"},
      {"--checkpoint-max-gb", "GB"},
      {"--exit-window", "DURATION"},
      {"--forward", "SIGNAL"},
      {"--estimate-steps", "STEPS"},
      {"--step-time", "DURATION"},
      {"--steps", "STEPS"},
      {"--gpu-hours", "HOURS"},
      {"--params", "COUNT"},
      {"--tokens", "COUNT"},
      {"--peak-tflops", "TFLOPS"},
      {"--mfu", "FRACTION"},
      {"--interruptions-per-100h", "COUNT"},
      {"--lost-per-interruption", "DURATION"},
      {"--bytes-per-param", "BYTES"},
      {"--activations-gb", "GB"},
      {"--price-per-hour", "USD_PER_HOUR"},
      {"--rps", "REQUESTS_PER_SECOND"},
      {"--utilisation", "FRACTION"},
      {"--predictions-per-day", "COUNT"},
      {"--reserved", "USD_PER_HOUR"},
      {"--on-demand", "USD_PER_HOUR"},
      {"--since", "DATE"},
      {"--until", "DATE"},
      {"--by", "team|experiment|project|user|host|day|tag:KEY|tracker"},
      {"--format", "FORMAT"},
      {"--status", "STATUS"},
      {"--limit", "COUNT"},
      {"--baseline", "VALUE"},
      {"--metric", "NAME"},
      {"--metric-goal", "min|max"},
      {"--note", "TEXT"},
      {"run", "RUN_ID"},
      {"run_id", "RUN_ID"},
      {"from", "LEDGER"},
      {"to", "LEDGER"},
      {"--reason", "TEXT"},
      {"command", "COMMAND"},
      {"file", "FILE"},
      {"policy_file", "FILE"},
  };
  // Each option's names looked up once: a lookup of every hint in every subcommand by CLI11's
  // get_option_no_throw (a scan copying each option's names) was a quarter of the instructions
  // of `spendcap run -- true` before its fork (callgrind).
  std::string dashed;
  for (CLI::Option* option : command.get_options()) {
    const char* hint = nullptr;
    for (const std::string& name : option->get_lnames()) {
      dashed.assign("--").append(name);
      if (auto it = kHints.find(dashed); it != kHints.end()) hint = it->second;
    }
    if (option->get_positional()) {
      for (const char* positional :
           {"run", "run_id", "from", "to", "command", "file", "policy_file"}) {
        if (option->check_name(positional)) hint = kHints.at(positional);
      }
    }
    if (hint) option->type_name(hint);
  }
  for (CLI::App* sub : command.get_subcommands({})) name_option_types(*sub);
}

// The exit-status table is printed once: by `spendcap --help` and `spendcap run --help`.
void keep_exit_table_on(CLI::App& app, const CLI::App* run) {
  for (CLI::App* sub : app.get_subcommands({})) {
    if (sub != run) sub->footer("");
    keep_exit_table_on(*sub, run);
  }
}

// The CLI11 tree as cli/command_line.hpp reads it, for the typo and stray-word checks.
CommandSpec describe(const CLI::App& command) {
  CommandSpec spec;
  spec.name = command.get_name();
  spec.fallthrough = command.get_fallthrough();
  for (const CLI::Option* option : command.get_options()) {
    if (!option->nonpositional()) {
      spec.has_positionals = true;
      continue;
    }
    OptionSpec described;
    for (const std::string& name : option->get_lnames()) described.names.push_back("--" + name);
    for (const std::string& name : option->get_snames()) described.names.push_back("-" + name);
    described.takes_value = option->get_items_expected_min() > 0;
    spec.options.push_back(std::move(described));
  }
  for (const CLI::App* sub : command.get_subcommands([](const CLI::App*) { return true; })) {
    spec.subcommands.push_back(describe(*sub));
  }
  return spec;
}

void add_ledger_options(CLI::App& command, LedgerChoice& choice) {
  command.add_option("--policy", choice.policy, "policy file (its ledger is used)");
  command.add_option("--ledger", choice.ledger, "ledger: sqlite:PATH, a path or postgresql://...");
}

}  // namespace spendcap
