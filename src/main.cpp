// spendcap: a hard dollar cap on any command. This file is the command line only: each subcommand
// fills a request and calls its function (run_command.hpp, admin_commands.hpp); errors thrown at
// the edges are printed here, once, as "spendcap: WHAT: WHY (HINT)".
#include <fcntl.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string_view>
#include <unordered_map>

#include "spendcap/base/error.hpp"
#include "spendcap/base/exit_code.hpp"
#include "spendcap/base/process_end.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/cli/admin.hpp"
#include "spendcap/cli/command_line.hpp"
#include "spendcap/cli/help.hpp"
#include "spendcap/cli/ledger_cli.hpp"
#include "spendcap/cli/report_commands.hpp"
#include "spendcap/cli/run.hpp"
#include "spendcap/cli/runs.hpp"
#include "spendcap/cli/webhooks.hpp"
#include "spendcap/process/launcher.hpp"
#include "spendcap/process/privileged_run.hpp"
#include "spendcap/run/ledger_group.hpp"
#include "spendcap/run/summary.hpp"

namespace {

using spendcap::ExitCode;

void add_run_options(CLI::App& run, spendcap::RunRequest& request) {
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
                 "how far ahead a ceiling is claimed from shared budgets (default 5m)");
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
spendcap::CommandSpec describe(const CLI::App& command) {
  spendcap::CommandSpec spec;
  spec.name = command.get_name();
  spec.fallthrough = command.get_fallthrough();
  for (const CLI::Option* option : command.get_options()) {
    if (!option->nonpositional()) {
      spec.has_positionals = true;
      continue;
    }
    spendcap::OptionSpec described;
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

void add_ledger_options(CLI::App& command, spendcap::LedgerChoice& choice) {
  command.add_option("--policy", choice.policy, "policy file (its ledger is used)");
  command.add_option("--ledger", choice.ledger, "ledger: sqlite:PATH, a path or postgresql://...");
}

}  // namespace

static int main_body(int argc, char** argv) {
  // A shared-runner install: the front, the runner's keeper, or the runner's supervisor, already
  // dropped to the service user (process/privileged_run.hpp).
  if (std::optional<int> done = spendcap::enter_shared_runner(argc, argv)) return *done;
  // Installed setgid for a shared ledger: act as the caller until the ledger is opened
  // (run/ledger_group.hpp).
  try {
    spendcap::settle_runner_process();
    spendcap::set_aside_ledger_group();
  } catch (const spendcap::Error& error) {
    std::cerr << "spendcap: " << spendcap::format_error(error) << "\n";
    return spendcap::to_int(ExitCode::internal);
  }
  // First of all: the fds and signal dispositions spendcap inherited, which the job gets back.
  spendcap::Inherited inherited = spendcap::Inherited::capture();
  // A closed stdin, stdout or stderr would hand its number to spendcap's next pipe, which the job
  // would then read or write as its own: fill the gap with /dev/null.
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) ::open("/dev/null", O_RDWR);
  }

  CLI::App app{"spendcap: a hard dollar cap on any command (ML training jobs and other long jobs)",
               "spendcap"};
  app.footer("\n" + spendcap::exit_code_table());
  app.require_subcommand(1);
  app.set_version_flag("--version", "spendcap 0.1.0");

  spendcap::RunRequest run_request;
  CLI::App* run = app.add_subcommand(
      "run", "run a command under a budget: spendcap run --rate 36 --budget 10 -- CMD ARGS...");
  add_run_options(*run, run_request);

  std::vector<std::string> policy_files;
  CLI::App* policy = app.add_subcommand("policy", "policy files");
  policy->require_subcommand(1);
  CLI::App* check = policy->add_subcommand("check", "validate policy files");
  check->add_option("file", policy_files, "policy files")->required();
  CLI::App* keys =
      policy->add_subcommand("keys", "every policy key, its flag, and whether it acts yet");

  spendcap::LedgerChoice choice;
  bool json = false;
  std::string apply_file;
  CLI::App* budgets = app.add_subcommand("budgets", "each budget: spent, running, remaining");
  add_ledger_options(*budgets, choice);
  budgets->add_flag("--json", json, "print JSON");
  CLI::App* apply = budgets->add_subcommand("apply", "set the ledger's budgets from a policy");
  apply->add_option("policy_file", apply_file, "the policy")->required();
  apply->fallthrough();  // `budgets apply --ledger X FILE` as well as `budgets --ledger X apply
                         // FILE`

  CLI::App* ps = app.add_subcommand("ps", "running and lost runs");
  add_ledger_options(*ps, choice);
  ps->add_flag("--json", json, "print JSON");

  spendcap::StopRequest stop_request;
  CLI::App* stop = app.add_subcommand("stop", "the kill switch: stop every run in a scope");
  add_ledger_options(*stop, choice);
  stop->add_option("--team", stop_request.team, "stop the team's runs");
  stop->add_option("--experiment", stop_request.experiment, "stop the experiment's runs");
  stop->add_option("--project", stop_request.project, "stop the project's runs");
  stop->add_option("--user", stop_request.user, "stop the user's runs");
  stop->add_option("--run", stop_request.run, "stop one run (its id)");
  stop->add_option("--job", stop_request.job,
                   "stop every run of a job key (every node of a multi-node --run-id)");
  stop->add_option("--reason", stop_request.reason, "why (shown to the runs' owners)");
  stop->add_flag("--clear", stop_request.clear, "clear the scope's stop orders instead");
  stop->add_flag("--list", stop_request.list, "list the active stop orders");
  stop->get_option("--run")->description("stop one run (its id, or any unique prefix: ps shows 8)");

  CLI::App* outbox = app.add_subcommand("outbox", "webhook events not delivered yet");
  outbox->require_subcommand(1);
  CLI::App* outbox_list = outbox->add_subcommand("list", "your undelivered webhook events");
  add_ledger_options(*outbox_list, choice);
  outbox_list->add_flag("--json", json, "print JSON");
  CLI::App* outbox_flush =
      outbox->add_subcommand("flush", "send your events whose webhook variables are set here");
  add_ledger_options(*outbox_flush, choice);

  spendcap::NotifyTestRequest notify_request;
  CLI::App* notify = app.add_subcommand("notify", "webhooks");
  notify->require_subcommand(1);
  CLI::App* notify_test =
      notify->add_subcommand("test", "send a test event to every configured webhook");
  notify_test->add_option("--policy", notify_request.policy,
                          "policy file (default: the search order in spendcap-policy(5))");
  notify_test->add_option("--webhook-env", notify_request.webhook_envs,
                          "also a webhook whose URL is in this variable (repeatable)");
  notify_test->add_option("--webhook", notify_request.webhook_urls, "also this URL (repeatable)");
  std::string copy_from, copy_to;
  CLI::App* ledger_command = app.add_subcommand("ledger", "the ledger itself");
  ledger_command->require_subcommand(1);
  CLI::App* copy = ledger_command->add_subcommand(
      "copy", "copy budgets, runs and stop orders into a new ledger (e.g. SQLite to PostgreSQL)");
  copy->add_option("from", copy_from, "the ledger to copy: sqlite:PATH, a path or postgresql://...")
      ->required();
  copy->add_option("to", copy_to, "the new, empty ledger")->required();
  std::string show_run;
  CLI::App* show = app.add_subcommand("show", "one run: spend, GPU time, energy, timeline");
  add_ledger_options(*show, choice);
  // Not required here: bare `show` says what it needs (CLI11 would say "run is required").
  show->add_option("run", show_run, "the run's id, or any unique prefix (runs and ps show 8)");
  show->add_flag("--json", json, "print JSON");
  spendcap::RunsRequest runs_request;
  CLI::App* runs = app.add_subcommand(
      "runs", "run history, newest first, as sacct: finished and running runs, one row each");
  {
    auto& r = runs_request;
    add_ledger_options(*runs, r.choice);
    runs->add_option("--since", r.since, "runs started from (2026-12-01, ...T10:00:00Z, 30d)");
    runs->add_option("--until", r.until, "runs started before (a date: through that day)");
    runs->add_option("--team", r.team, "only the team's runs");
    runs->add_option("--experiment", r.experiment, "only the experiment's runs");
    runs->add_option("--user", r.user, "only the user's runs");
    runs->add_option("--status", r.status,
                     "only runs with this status (running, succeeded, failed, killed, refused, "
                     "lost, preempted)");
    runs->add_option("--limit", r.limit, "at most this many, the newest (default 50)");
    runs->add_flag("--json", r.json, "print JSON");
    runs->add_option("--format", r.format, "table (default), csv or json");
  }
  // ---- report, estimate, accept (cli/report_commands.hpp) ----
  spendcap::EstimateRequest estimate_request;
  CLI::App* estimate = app.add_subcommand("estimate", "what a run will cost, before it starts");
  {
    auto& r = estimate_request;
    add_ledger_options(*estimate, r.choice);
    estimate->add_option("--step-time", r.step_time, "time per step (0.8s)");
    estimate->add_option("--steps", r.steps, "number of steps");
    estimate->add_option("--gpu-hours", r.gpu_hours, "GPU-hours of work (2000), priced per GPU");
    estimate->add_option("--params", r.params, "model parameters (1e9)");
    estimate->add_option("--tokens", r.tokens, "training tokens (20e9): about 6ND FLOPs");
    estimate->add_option("--peak-tflops", r.peak_tflops,
                         "peak TFLOP/s per GPU (else the policy's)");
    estimate->add_option("--mfu", r.mfu, "model FLOPs utilisation (default 0.4)");
    estimate->add_option("--rate", r.rate, "price per hour (per instance; per GPU for --params)");
    estimate->add_option("--gpu", r.gpu, "GPU type, priced by the policy");
    estimate->add_option("--gpus", r.gpus, "GPUs (per instance for --steps; in all for --params)");
    estimate->add_option("--instance", r.instance, "instance type, priced by the policy");
    estimate->add_option("--instances", r.instances, "number of instances (default 1)");
    estimate->add_option("--pricing", r.pricing, "on-demand, spot or reserved");
    estimate->add_option("--interruptions-per-100h", r.interruptions_per_100h,
                         "spot interruptions per 100 hours");
    estimate->add_option("--lost-per-interruption", r.lost_per_interruption,
                         "work lost per interruption (30m)");
    estimate->add_option("--team", r.team, "fit the team's remaining budget (exit 120 if not)");
    estimate->add_option("--experiment", r.experiment, "fit the experiment's remaining budget");
    estimate->add_flag("--compare", r.compare, "price the work on every GPU type of the policy");
    estimate->add_option("--bytes-per-param", r.bytes_per_param,
                         "training state per parameter (default 16: mixed-precision Adam)");
    estimate->add_option("--activations-gb", r.activations_gb, "activation memory, GB");
    estimate->add_flag("--serving", r.serving, "cost per prediction of a serving process");
    estimate->add_option("--price-per-hour", r.price_per_hour, "serving: price of a replica");
    estimate->add_option("--rps", r.rps, "serving: requests per second at full load");
    estimate->add_option("--utilisation", r.utilisation, "serving: fraction of time busy");
    estimate->add_option("--predictions-per-day", r.predictions_per_day,
                         "serving: predictions a day (instead of --rps and --utilisation)");
    estimate->add_option("--reserved", r.reserved, "reserved price per hour");
    estimate->add_option("--on-demand", r.on_demand, "on-demand price per hour");
    estimate->add_flag("--json", r.json, "print JSON");
  }
  spendcap::ReportRequest report_request;
  CLI::App* report = app.add_subcommand("report", "showback: spend by team, experiment, ...");
  {
    auto& r = report_request;
    add_ledger_options(*report, r.choice);
    report->add_option("--by", r.by,
                       "team|experiment|project|user|host|day|tag:KEY|tracker (repeatable)");
    report->add_option("--since", r.since, "runs started from (2026-12-01, ...T10:00:00Z, 30d)");
    report->add_option("--until", r.until, "runs started before (a date: through that day)");
    report->add_option("--team", r.team, "only the team's runs");
    report->add_option("--experiment", r.experiment, "only the experiment's runs");
    report->add_option("--format", r.format, "table, csv, json, focus (FOCUS 1.2 CSV) or html");
    report->add_option("--baseline", r.baseline, "metric baseline for cost per metric point");
    report->add_option("--metric", r.metric, "the metric the baseline is of");
    report->add_option("--metric-goal", r.metric_goal, "max (improves upward) or min (a loss)");
    report->add_flag("--csv-raw", r.csv_raw,
                     "csv/focus: cells as stored, no formula guard (for machine pipelines)");
  }
  std::string accept_run_id, accept_note;
  CLI::App* accept = app.add_subcommand("accept", "mark a run's result as the one kept");
  add_ledger_options(*accept, choice);
  accept->add_option("run_id", accept_run_id, "the run (its id, or any unique prefix)")->required();
  accept->add_option("--note", accept_note, "why it is kept");

  spendcap::HelpRequest help_request;
  CLI::App* help = spendcap::add_help_command(app, help_request);

  accept_count_suffixes(*estimate, "--steps");
  accept_count_suffixes(*estimate, "--params");
  accept_count_suffixes(*estimate, "--tokens");
  accept_count_suffixes(*estimate, "--predictions-per-day");
  accept_count_suffixes(*run, "--estimate-steps");
  name_option_types(app);  // after every subcommand is added
  keep_exit_table_on(app, run);
  spendcap::install_help_format(app);

  // A typo or a stray word is named with what to do, before or instead of CLI11's message.
  auto refuse_command_line = [&](const std::optional<spendcap::CommandLineProblem>& problem) {
    std::string what =
        problem->where == "spendcap" ? problem->word : problem->where + " " + problem->word;
    spendcap::Error error(what, problem->message, problem->hint);
    std::cerr << "spendcap: " << spendcap::escape_for_terminal(spendcap::format_error(error))
              << "\n";
    if (*run && run_request.status_file) {
      spendcap::write_error_status(*run_request.status_file, error);
    }
    return spendcap::to_int(ExitCode::internal);
  };
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    bool asked = dynamic_cast<const CLI::CallForHelp*>(&error) ||
                 dynamic_cast<const CLI::CallForAllHelp*>(&error) ||
                 dynamic_cast<const CLI::CallForVersion*>(&error);
    if (!asked) {
      if (auto problem = spendcap::find_command_line_problem(describe(app), args)) {
        return refuse_command_line(problem);
      }
    }
    int status = app.exit(error);
    if (status != 0 && *run && run_request.status_file) {
      spendcap::write_error_status(*run_request.status_file,
                                   spendcap::Error("run", error.what(), "see spendcap run --help"));
    }
    return status == 0 ? 0 : spendcap::to_int(ExitCode::internal);
  }
  if (auto problem = spendcap::find_command_line_problem(describe(app), args)) {
    return refuse_command_line(problem);
  }
  if (*run && run_request.title && run_request.quiet) {
    // --quiet prints errors only, the title included: together they would accept --title and
    // show nothing.
    return refuse_command_line(spendcap::CommandLineProblem{
        "run", "--title", "does nothing with --quiet (which prints errors only, no title)",
        "drop one of them"});
  }

  try {
    if (*run) return spendcap::run_command(run_request, inherited);
    if (*check) return spendcap::policy_check_command(policy_files);
    if (*keys) return spendcap::policy_keys_command();
    if (*apply) return spendcap::budgets_apply_command(choice, apply_file);
    if (*budgets) return spendcap::budgets_command(choice, json);
    if (*ps) return spendcap::ps_command(choice, json);
    if (*stop) return spendcap::stop_command(choice, stop_request);
    if (*outbox_list) return spendcap::outbox_list_command(choice, json);
    if (*outbox_flush) return spendcap::outbox_flush_command(choice);
    if (*notify_test) return spendcap::notify_test_command(notify_request);
    if (*copy) return spendcap::ledger_copy_command(copy_from, copy_to);
    if (*show && show_run.empty()) {
      throw spendcap::Error("show", "which run? give its id, or any unique prefix of it",
                            "spendcap runs lists the recent runs (the ID column); then "
                            "spendcap show ID");
    }
    if (*show) return spendcap::show_command(choice, show_run, json);
    if (*runs) return spendcap::runs_command(runs_request);
    if (*estimate) return spendcap::estimate_command(estimate_request);
    if (*report) return spendcap::report_command(report_request);
    if (*accept) return spendcap::accept_command(choice, accept_run_id, accept_note);
    if (*help) return spendcap::help_command(app, help_request);
  } catch (const spendcap::Error& error) {
    std::cerr << "spendcap: " << spendcap::escape_for_terminal(spendcap::format_error(error))
              << "\n";
    for (const std::string& detail : error.details) {
      std::cerr << "  " << spendcap::escape_for_terminal(detail) << "\n";
    }
    return spendcap::to_int(error.code());
  } catch (const std::exception& error) {
    std::cerr << "spendcap: internal error: " << spendcap::escape_for_terminal(error.what())
              << "\n";
    return spendcap::to_int(ExitCode::internal);
  }
  return spendcap::to_int(ExitCode::internal);
}

// A ledger call or webhook attempt left a thread inside libpq or libcurl: the process ends without
// the libraries' finalisers (base/process_end.hpp).
int main(int argc, char** argv) {
  return spendcap::end_of_main(main_body(argc, argv));
}
