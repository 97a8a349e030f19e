// `spendcap ledger copy`. Contract in ledger_cli.hpp.
#include "spendcap/cli/ledger_cli.hpp"

#include <CLI/CLI.hpp>
#include <memory>

#include "spendcap/cli/command_tree.hpp"
#include "spendcap/cli/verbs.hpp"

#include <iostream>

#include "spendcap/base/error.hpp"
#include "spendcap/ledger/backends.hpp"
#include "spendcap/ledger/ledger_copy.hpp"
#include "spendcap/run/ledger_group.hpp"

namespace spendcap {

int ledger_copy_command(const std::string& from_url, const std::string& to_url) {
  if (installed_setgid()) {
    throw Error("ledger copy", "refused by a setgid spendcap",
                "run it as the ledgers' owner with a spendcap that is not installed setgid");
  }
  std::unique_ptr<LedgerStore> from = open_ledger_store(from_url);
  std::unique_ptr<LedgerStore> to = open_ledger_store(to_url);
  CopiedLedger copied = copy_ledger(*from, *to);
  std::cout << "copied " << copied.runs << " runs, " << copied.budgets << " budgets and "
            << copied.stop_orders << " active stop orders from " << from->url() << " to "
            << to->url();
  if (copied.finished_run_orders) {
    std::cout << " (and " << copied.finished_run_orders
              << " orders on runs that have finished, kept but not active)";
  }
  if (copied.refused_counts) {
    std::cout << "; and " << copied.refused_counts
              << " counts of refused runs per user and minute (" << copied.refused_runs
              << " refused runs)";
  }
  std::cout << "\n";
  return 0;
}

namespace {

struct CopyArgs {
  std::string from, to;
};

VerbRun add_ledger(CLI::App& command, CLI::App&, VerbContext&) {
  auto args = std::make_shared<CopyArgs>();
  CLI::App* ledger_command = &command;
  ledger_command->require_subcommand(1);
  CLI::App* copy = ledger_command->add_subcommand(
      "copy", "copy budgets, runs and stop orders into a new ledger (e.g. SQLite to PostgreSQL)");
  copy->add_option("from", args->from,
                   "the ledger to copy: sqlite:PATH, a path or postgresql://...")
      ->required();
  copy->add_option("to", args->to, "the new, empty ledger")->required();
  return [args, copy] {
    if (*copy) return ledger_copy_command(args->from, args->to);
    return to_int(ExitCode::internal);
  };
}

}  // namespace

const Verb kLedgerVerb = {"ledger", "the ledger itself", add_ledger};

}  // namespace spendcap
