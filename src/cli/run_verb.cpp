// `spendcap run`'s row of the verb table (verbs.hpp): its options are command_tree's
// add_run_options, what it does is run_command (cli/run.hpp).
#include <CLI/CLI.hpp>
#include <memory>

#include "spendcap/cli/command_tree.hpp"
#include "spendcap/cli/run.hpp"
#include "spendcap/cli/verbs.hpp"

namespace spendcap {

namespace {

VerbRun add_run(CLI::App& command, CLI::App&, VerbContext& context) {
  auto request = std::make_shared<RunRequest>();
  add_run_options(command, *request);
  accept_count_suffixes(command, "--estimate-steps");
  context.run_status_file = &request->status_file;
  return [request, &context] {
    if (request->title && request->quiet) {
      // --quiet prints errors only, the title included: together they would accept --title and
      // show nothing.
      return refuse_command_line(
          CommandLineProblem{"run", "--title",
                             "does nothing with --quiet (which prints errors only, no title)",
                             "drop one of them"},
          context);
    }
    return run_command(*request, context.inherited);
  };
}

}  // namespace

const Verb kRunVerb = {
    "run", "run a command under a budget: spendcap run --rate 36 --budget 10 -- CMD ARGS...",
    add_run};

}  // namespace spendcap
