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

std::optional<std::string_view> chosen_verb(const std::vector<std::string>& args) {
  if (args.empty() || args.front() == kHelpVerb.name) return std::nullopt;
  for (const Verb* verb : kVerbs) {
    if (args.front() == verb->name) return verb->name;
  }
  return std::nullopt;
}

std::vector<AddedVerb> add_verbs(CLI::App& app, VerbContext& context,
                                 std::optional<std::string_view> only) {
  std::vector<AddedVerb> added;
  added.reserve(std::size(kVerbs));
  for (const Verb* verb : kVerbs) {
    CLI::App* command = app.add_subcommand(verb->name, verb->summary);
    if (only && *only != verb->name) {
      // Never chosen: the command line's first word is another verb.
      added.push_back({command, [] { return to_int(ExitCode::internal); }});
      continue;
    }
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
