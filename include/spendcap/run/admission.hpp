// A run's admission (`spendcap run`'s second step): the ledger opened (spool replayed, a personal
// ledger's budgets applied), the crash-loop guard (refuse, wait out recent failures, or a cleared
// loop), then the ledger's grant; a refusal is said, told to the webhooks and written to the status
// file (120). An admitted run holds a ceiling until its final row.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "spendcap/guards/crash_loop.hpp"
#include "spendcap/ledger/ledger.hpp"
#include "spendcap/notify/webhook_notifier.hpp"
#include "spendcap/run/run_host.hpp"
#include "spendcap/run/settings.hpp"
#include "spendcap/supervise/reporter.hpp"

namespace spendcap {

// Opens the ledger, replays what earlier runs on this host spooled, and, on a personal ledger (the
// caller's own file), applies the policy's budgets: loading the owner's policy applies it.
std::shared_ptr<Ledger> open_run_ledger(RunHost& host, const RunSettings& settings,
                                        const TestSwitches& switches, const Reporter& reporter);

// What the ledger is asked to admit: the run's identity, its rate, reserve and first claim.
RunStart make_run_start(const RunSettings& settings);

// What the webhooks say about the run (notify/payload.hpp): its identity and what it costs.
RunFacts run_facts(const RunSettings& settings, const Admission& admission);

// The crash-loop guard's verdict on this command's recent runs (no verdict when it is off); the
// history it read and whose failures counted, where asked. Reads the ledger only (--dry-run).
CrashLoopVerdict crash_loop_verdict(const RunSettings& settings, const RunStart& start,
                                    Ledger& ledger, bool retry_backoff,
                                    CommandHistory* history_out = nullptr,
                                    std::vector<std::string>* counted_out = nullptr);

// The crash-loop guard, before admission: 0 to go on (after the back-off wait, with
// --retry-backoff), else the exit status of the refusal (120), recorded as a refused row.
int check_crash_loop(RunHost& host, const RunSettings& settings, RunStart& start, Ledger& ledger,
                     std::vector<WebhookTarget>& webhooks, const Environment& env,
                     const Reporter& reporter);

// The `refused` event (`reason`, the refusing `scope` or ""), delivered before spendcap exits,
// else left in the outbox.
void tell_refused(RunHost& host, std::vector<WebhookTarget> webhooks, const RunFacts& facts,
                  Ledger& ledger, const Environment& env, const Reporter& reporter,
                  const std::string& reason, const std::string& scope, const std::string& refusal);

// Refused at admission (120): says why, and writes the status file. Re-raises a stop signal that
// came meanwhile.
int refuse(const RunSettings& settings, const Admission& admission, const Reporter& reporter);

// "the shutdown reserve $0.71 is 71% of the budget $1.00": a budget mostly eaten by the reserve
// stops the run soon after it starts.
void warn_about_reserve(const RunSettings& settings, const Admission& admission,
                        const Reporter& reporter);

// A job key's budget is the latest --budget: raising (or lowering) it is said, never silent.
void say_job_budget_change(const RunSettings& settings, const Admission& admission,
                           const Reporter& reporter);

// A run the ledger admitted holds a ceiling until its final row. If spendcap fails before the
// command is launched, the row is finished here (failed, nothing spent) instead of waiting to be
// reconciled and charged its whole ceiling.
class AdmittedRun {
 public:
  AdmittedRun(Ledger& ledger, std::string run_id) : ledger_(ledger), run_id_(std::move(run_id)) {}
  ~AdmittedRun() {
    if (launched_) return;
    try {
      ledger_.finish_run(
          RunFinal{run_id_, RunStatus::failed, "not launched", std::nullopt, Money{}, 0});
    } catch (...) {
      // Still held: the lost-run reconciliation charges it. Nothing else can be done here.
    }
  }
  AdmittedRun(const AdmittedRun&) = delete;
  AdmittedRun& operator=(const AdmittedRun&) = delete;
  void launched() { launched_ = true; }

 private:
  Ledger& ledger_;
  std::string run_id_;
  bool launched_ = false;
};

}  // namespace spendcap
