// The pieces of the CLI11 tree that several verbs, or the whole tree, share: run's options, the
// ledger options of the verbs that read the ledger, count suffixes ("50k"), the typed value hints
// of --help ("--rate USD_PER_HOUR"), where the exit-status table is printed, and the tree as
// cli/command_line.hpp reads it.
#pragma once

#include "spendcap/cli/command_line.hpp"
#include "spendcap/cli/ledger_session.hpp"
#include "spendcap/run/request.hpp"

namespace CLI {
class App;
}

namespace spendcap {

// `spendcap run`'s options, filling `request`.
void add_run_options(CLI::App& run, RunRequest& request);

// --policy and --ledger, filling `choice`.
void add_ledger_options(CLI::App& command, LedgerChoice& choice);

// Lets the option `name` of `command` take "50k", "1.5M", "7B", "1T" for its count.
void accept_count_suffixes(CLI::App& command, const char* name);

// Typed hints in --help for every option of `command` and its subcommands, by the option's name.
void name_option_types(CLI::App& command);

// Leaves the exit-status footer on `app` and `run` only.
void keep_exit_table_on(CLI::App& app, const CLI::App* run);

// The CLI11 tree as cli/command_line.hpp reads it, for the typo and stray-word checks.
CommandSpec describe(const CLI::App& command);

}  // namespace spendcap
