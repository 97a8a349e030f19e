// `spendcap ledger copy`. Contract in ledger_cli.hpp.
#include "spendcap/cli/ledger_cli.hpp"

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
            << to->url() << "\n";
  return 0;
}

}  // namespace spendcap
