// spendcap: a hard dollar cap on any command. This file is the command line only: each subcommand
// fills a request and calls its function (run_command.hpp, admin_commands.hpp); errors thrown at
// the edges are printed here, once, as "spendcap: WHAT: WHY (HINT)".
#include <fcntl.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <iostream>

#include "spendcap/base/error.hpp"
#include "spendcap/base/exit_code.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/cli/admin.hpp"
#include "spendcap/cli/ledger_group.hpp"
#include "spendcap/cli/run.hpp"
#include "spendcap/process/launcher.hpp"

namespace {

using spendcap::ExitCode;

void add_run_options(CLI::App& run, spendcap::RunRequest& request) {
  run.add_option("--team", request.team, "the team the run is charged to");
  run.add_option("--experiment", request.experiment, "the experiment it belongs to");
  run.add_option("--project", request.project, "the project it belongs to");
  run.add_option("--tag", request.tags, "a free tag KEY=VALUE (repeatable)");
  run.add_option("--job-key", request.job_key,
                 "one job across restarts: --budget is shared by every run with this key");
  run.add_option("--rate", request.rate, "burn rate in USD per hour (instead of --gpu/--instance)");
  run.add_option("--budget", request.budget, "the most this run (or job key) may spend, in USD");
  run.add_option("--gpu", request.gpu, "GPU type, priced by the policy (e.g. a100-80gb)");
  run.add_option("--gpus", request.gpus,
                 "GPUs per instance (default: CUDA_VISIBLE_DEVICES or Slurm's, else 1)");
  run.add_option("--instance", request.instance, "instance type, priced by the policy");
  run.add_option("--instances", request.instances, "number of instances (default 1)");
  run.add_option("--pricing", request.pricing, "on-demand, spot or reserved");
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
  run.add_option("--status-file", request.status_file, "write the outcome here as JSON");
  run.add_option("--policy", request.policy, "policy file (default: see README)");
  run.add_option("--ledger", request.ledger, "ledger: sqlite:PATH or a path");
  run.add_flag("--quiet,-q", request.quiet, "print errors only");
  run.add_flag("--title", request.title, "show live spend in the terminal title");
  // Not required here: run says what to do when it is missing (give the command after --).
  run.add_option("command", request.command, "the command and its arguments, after --");
  run.positionals_at_end();
}

// Typed hints in --help ("--rate USD_PER_HOUR", not "TEXT"), set by name so that a flag added
// anywhere gets its hint here; a flag not listed keeps CLI11's.
void name_option_types(CLI::App& command) {
  static const std::pair<const char*, const char*> kHints[] = {
      {"--team", "TEAM"},
      {"--experiment", "EXPERIMENT"},
      {"--project", "PROJECT"},
      {"--user", "USER"},
      {"--run", "RUN_ID"},
      {"--tag", "KEY=VALUE"},
      {"--job-key", "KEY"},
      {"--rate", "USD_PER_HOUR"},
      {"--budget", "USD"},
      {"--gpu", "GPU_TYPE"},
      {"--gpus", "COUNT"},
      {"--instance", "INSTANCE_TYPE"},
      {"--instances", "COUNT"},
      {"--pricing", "on-demand|spot|reserved"},
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
      {"--ledger", "sqlite:PATH|PATH"},
      {"--reason", "TEXT"},
      {"command", "COMMAND"},
      {"file", "FILE"},
      {"policy_file", "FILE"},
  };
  for (const auto& [name, hint] : kHints) {
    try {
      command.get_option(name)->type_name(hint);
    } catch (const CLI::OptionNotFound&) {
    }
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

void add_ledger_options(CLI::App& command, spendcap::LedgerChoice& choice) {
  command.add_option("--policy", choice.policy, "policy file (its ledger is used)");
  command.add_option("--ledger", choice.ledger, "ledger: sqlite:PATH or a path");
}

}  // namespace

int main(int argc, char** argv) {
  // Installed setgid for a shared ledger: act as the caller until the ledger is opened
  // (cli/ledger_group.hpp).
  try {
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
  stop->add_option("--reason", stop_request.reason, "why (shown to the runs' owners)");
  stop->add_flag("--clear", stop_request.clear, "clear the scope's stop orders instead");
  stop->add_flag("--list", stop_request.list, "list the active stop orders");
  stop->get_option("--run")->description("stop one run (its id, or any unique prefix: ps shows 8)");
  name_option_types(app);
  keep_exit_table_on(app, run);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    int status = app.exit(error);
    if (status != 0 && *run && run_request.status_file) {
      spendcap::write_error_status(*run_request.status_file,
                                   spendcap::Error("run", error.what(), "see spendcap run --help"));
    }
    return status == 0 ? 0 : spendcap::to_int(ExitCode::internal);
  }

  try {
    if (*run) return spendcap::run_command(run_request, inherited);
    if (*check) return spendcap::policy_check_command(policy_files);
    if (*keys) return spendcap::policy_keys_command();
    if (*apply) return spendcap::budgets_apply_command(choice, apply_file);
    if (*budgets) return spendcap::budgets_command(choice, json);
    if (*ps) return spendcap::ps_command(choice, json);
    if (*stop) return spendcap::stop_command(choice, stop_request);
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
