// The verb table and the tree built from it (verbs.hpp).
#include "spendcap/cli/verbs.hpp"

#include <CLI/CLI.hpp>
#include <iostream>

#include "spendcap/base/error.hpp"
#include "spendcap/base/exit_code.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/cli/command_tree.hpp"
#include "spendcap/cli/help.hpp"
#include "spendcap/run/summary.hpp"

namespace spendcap {

namespace {

constexpr const Verb* kVerbs[] = {
    &kRunVerb,      &kPolicyVerb, &kBudgetsVerb, &kPsVerb,   &kStopVerb,
    &kOutboxVerb,   &kNotifyVerb, &kLedgerVerb,  &kShowVerb, &kRunsVerb,
    &kEstimateVerb, &kReportVerb, &kAcceptVerb,  &kHelpVerb,
};

}  // namespace

std::span<const Verb* const> verb_table() {
  return kVerbs;
}

std::vector<AddedVerb> add_verbs(CLI::App& app, VerbContext& context) {
  std::vector<AddedVerb> added;
  added.reserve(std::size(kVerbs));
  for (const Verb* verb : kVerbs) {
    CLI::App* command = app.add_subcommand(verb->name, verb->summary);
    added.push_back({command, verb->add(*command, app, context)});
  }
  name_option_types(app);  // after every subcommand is added
  keep_exit_table_on(app, app.get_subcommand("run"));
  install_help_format(app);
  return added;
}

int refuse_command_line(const CommandLineProblem& problem, const VerbContext& context) {
  std::string what =
      problem.where == "spendcap" ? problem.word : problem.where + " " + problem.word;
  Error error(what, problem.message, problem.hint);
  std::cerr << "spendcap: " << escape_for_terminal(format_error(error)) << "\n";
  if (context.run_status_file && *context.run_status_file) {
    write_error_status(**context.run_status_file, error);
  }
  return to_int(ExitCode::internal);
}

}  // namespace spendcap
