// `accept`: mark a run's result as the one kept (report_commands.hpp).
#include "spendcap/cli/report_commands.hpp"

#include <CLI/CLI.hpp>
#include <memory>

#include "spendcap/cli/command_tree.hpp"
#include "spendcap/cli/runs.hpp"
#include "spendcap/cli/verbs.hpp"

#include "admin_parts.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "spendcap/base/json_text.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/ledger/ledger_store.hpp"
#include "spendcap/policy/layers.hpp"
#include "spendcap/report/estimate.hpp"
#include "spendcap/report/report.hpp"
#include "spendcap/report/report_rollup.hpp"
#include "spendcap/run/estimate_fit.hpp"
#include "spendcap/supervise/run_env.hpp"

namespace spendcap {

using admin_parts::load_chosen_policy;
using admin_parts::utc_now;

int accept_command(const LedgerChoice& choice, const std::string& run_id, const std::string& note) {
  require_printable_name(run_id, "accept");
  LedgerSession session = open_ledger_session(choice);
  // The write a writing verb owes the host first (ledger_session.hpp).
  settle_host_debts(session);
  std::unique_ptr<Ledger>& ledger = session.ledger;
  // Any unique prefix, as `runs` prints it (cli/runs.hpp).
  std::string full_id = resolve_run_id(*ledger, run_id, "accept " + run_id);
  AcceptedResult accepted = ledger->accept_run(full_id, note, user_name() + "@" + host_name());
  std::cout << "accepted " << escape_for_terminal(full_id)
            << (note.empty() ? std::string() : ": " + escape_for_terminal(note)) << "\n";
  return 0;
}

namespace {

struct AcceptArgs {
  LedgerChoice choice;
  std::string run_id, note;
};

VerbRun add_accept(CLI::App& command, CLI::App&, VerbContext&) {
  auto args = std::make_shared<AcceptArgs>();
  CLI::App* accept = &command;
  add_ledger_options(*accept, args->choice);
  accept->add_option("run_id", args->run_id, "the run (its id, or any unique prefix)")->required();
  accept->add_option("--note", args->note, "why it is kept");
  return [args] { return accept_command(args->choice, args->run_id, args->note); };
}

}  // namespace

const Verb kAcceptVerb = {"accept", "mark a run's result as the one kept", add_accept};

}  // namespace spendcap
