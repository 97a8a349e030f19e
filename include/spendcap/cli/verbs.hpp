// The verb table, as ninja's Tool table: every verb of spendcap is one `Verb` (its name, its
// one-line summary, and the function that adds its options to the command line and returns what
// runs it), defined in the verb's own file (cli/*_verb.cpp, run_options, webhooks, ...). main.cpp
// builds the CLI11 tree from the table (add_verbs), parses, and runs the one verb chosen. The
// same tree is what `--help`, `spendcap help` and the man pages read (cli/help.hpp), so a verb's
// options are written once; its hand-written text (description, examples) is its row of
// manual_text.cpp, found by the verb's name; the bash completion (share/completions/) is checked
// against the tree by tests/integration/test_packaging.py.
//
// The table is constant (names, texts and function pointers: nothing is built before main).
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "spendcap/cli/command_line.hpp"

namespace CLI {
class App;
}

namespace spendcap {

struct Inherited;

// What a verb may need from the process beyond its own options.
struct VerbContext {
  const Inherited& inherited;  // the fds and signal dispositions the job gets back (run)
  // `run`'s --status-file once its options are added: a command-line error is written there too.
  const std::optional<std::string>* run_status_file = nullptr;
};

// Runs the verb once the command line is parsed; returns the exit status. Errors are thrown as
// spendcap::Error and printed by main.
using VerbRun = std::function<int()>;

struct Verb {
  const char* name;
  const char* summary;  // the line of `spendcap --help`'s list and of the verb's page
  // Adds the verb's options (and verbs of its own) to `command`, the verb's subcommand of `root`.
  VerbRun (*add)(CLI::App& command, CLI::App& root, VerbContext& context);
};

// Every verb, in the order `spendcap --help` lists them.
std::span<const Verb* const> verb_table();

struct AddedVerb {
  CLI::App* command;  // chosen when it was parsed
  VerbRun run;
};

// Adds every verb of the table to `app`, then what the whole tree shares: the value hints, the
// exit-status footer (on spendcap and run only), the help layout. With `only` (the verb the
// command line names, see chosen_verb), the other verbs get their name and summary alone: their
// options cannot be parsed anyway, and building them is most of a short run's command-line cost
// (issue 41).
std::vector<AddedVerb> add_verbs(CLI::App& app, VerbContext& context,
                                 std::optional<std::string_view> only = std::nullopt);

// The verb `args` (argv without the program) names first, when its tree alone answers them: not
// `help`, which reads every verb's page, and nothing when the first word is an option or a typo
// (the whole tree is then needed for --help's list and the nearest-verb hint).
std::optional<std::string_view> chosen_verb(const std::vector<std::string>& args);

// Prints `problem` as spendcap's error (and writes it to run's --status-file); returns 125.
int refuse_command_line(const CommandLineProblem& problem, const VerbContext& context);

extern const Verb kRunVerb, kPolicyVerb, kBudgetsVerb, kPsVerb, kStopVerb, kOutboxVerb, kNotifyVerb,
    kLedgerVerb, kShowVerb, kRunsVerb, kEstimateVerb, kReportVerb, kAcceptVerb, kHelpVerb;

}  // namespace spendcap
