// spendcap: a hard dollar cap on any command. This file is the command line only, as named steps:
// the shared runner's and the setgid install's first moves, what was inherited, the CLI11 tree
// built from the verb table (cli/verbs.hpp), the parse, and the one verb chosen; errors thrown at
// the edges are printed here, once, as "spendcap: WHAT: WHY (HINT)".
#include <fcntl.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <iostream>

#include "spendcap/base/error.hpp"
#include "spendcap/base/exit_code.hpp"
#include "spendcap/base/process_end.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/cli/command_line.hpp"
#include "spendcap/cli/command_tree.hpp"
#include "spendcap/cli/verbs.hpp"
#include "spendcap/process/launcher.hpp"
#include "spendcap/run/ledger_group.hpp"
#include "spendcap/run/summary.hpp"
#include "spendcap/shared_runner/entry.hpp"

using spendcap::ExitCode;

static int main_body(int argc, char** argv) {
  // A shared-runner install: the front, the runner's keeper, or the runner's supervisor, already
  // dropped to the service user (shared_runner/entry.hpp).
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

  // Only the verb the command line names is built in full (verbs.hpp chosen_verb).
  std::vector<std::string> args(argv + 1, argv + argc);
  spendcap::VerbContext context{inherited};
  std::vector<spendcap::AddedVerb> verbs =
      spendcap::add_verbs(app, context, spendcap::chosen_verb(args));

  // A typo or a stray word is named with what to do, before or instead of CLI11's message.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    bool asked = dynamic_cast<const CLI::CallForHelp*>(&error) ||
                 dynamic_cast<const CLI::CallForAllHelp*>(&error) ||
                 dynamic_cast<const CLI::CallForVersion*>(&error);
    if (!asked) {
      if (auto problem = spendcap::find_command_line_problem(spendcap::describe(app), args)) {
        return spendcap::refuse_command_line(*problem, context);
      }
    }
    int status = app.exit(error);
    if (status != 0 && context.run_status_file && *context.run_status_file) {
      spendcap::write_error_status(**context.run_status_file,
                                   spendcap::Error("run", error.what(), "see spendcap run --help"));
    }
    return status == 0 ? 0 : spendcap::to_int(ExitCode::internal);
  }
  if (auto problem = spendcap::find_command_line_problem(spendcap::describe(app), args)) {
    return spendcap::refuse_command_line(*problem, context);
  }
  try {
    for (spendcap::AddedVerb& verb : verbs) {
      if (*verb.command) return verb.run();
    }
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
