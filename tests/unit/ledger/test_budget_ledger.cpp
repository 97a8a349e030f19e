// BudgetLedger's rules against an in-memory store (fakes/fake_ledger_store.hpp): what it asks of
// the seam, and the arithmetic the conformance suite only sees from outside.
#include <doctest/doctest.h>

#include <memory>

#include "fakes/fake_ledger_store.hpp"
#include "ledger/ledger_conformance.hpp"
#include "spendcap/base/error.hpp"
#include "spendcap/ledger/budget_ledger.hpp"

namespace spendcap::testing {
namespace {

const Scope kVision{ScopeKind::team, "vision"};
const Scope kSweep{ScopeKind::experiment, "sweep"};

// A BudgetLedger over a fresh fake store, on a clock the test moves.
struct FakeLedger {
  std::shared_ptr<FakeLedgerState> state = std::make_shared<FakeLedgerState>();
  TestClock clock{unix_time(2024, 1, 31, 12)};
  BudgetLedger ledger{std::make_unique<FakeLedgerStore>(state, [this] { return clock.now(); }),
                      LedgerOptions{}};

  FakeLedgerData& data() { return state->data; }
  Usage usage(const Scope& scope) { return data().usage[{scope, utc_day(clock.now())}]; }
  void budget(const Scope& scope, double amount) {
    ledger.apply_budgets({{scope, usd(amount), Period::month, std::nullopt}}, false);
  }
};

}  // namespace

TEST_CASE("BudgetLedger: admission refused names the binding scope and holds nothing") {
  FakeLedger t;
  t.budget(kVision, 10);
  t.budget(kSweep, 1);
  RunStart first = claim_start("r1", "vision", usd(0.99));
  first.experiment = "sweep";
  REQUIRE(t.ledger.begin_run(first).admitted);

  RunStart second = claim_start("r2", "vision", usd(1));
  second.experiment = "sweep";
  Admission refused = t.ledger.begin_run(second);
  CHECK_FALSE(refused.admitted);
  CHECK(refused.refused_by == kSweep);  // the team has $9.01 left; the experiment binds
  CHECK(refused.grant.binding == kSweep);
  CHECK(refused.grant.ceiling == Money{});
  CHECK(refused.refusal ==
        "experiment:sweep budget $1.00 (month) has $0.01 left: $0.00 spent, $0.99 held by "
        "1 running run; this run needs more than its $0.03 shutdown reserve");
  const RunRecord& row = t.data().runs.at("r2");
  CHECK(row.status == RunStatus::refused);
  CHECK(row.reason == "refused: budget experiment:sweep");
  CHECK(row.finished_at == t.clock.now());
  CHECK(t.usage(kSweep).held == usd(0.99));  // the refused run added nothing
  CHECK(t.usage(kVision).held == usd(0.99));
  CHECK(FakeLedgerStore::inconsistencies(t.data()).empty());
}

TEST_CASE("BudgetLedger: a heartbeat's raise is capped by the headroom, and moves only deltas") {
  FakeLedger t;
  t.budget(kVision, 2);
  REQUIRE(t.ledger.begin_run(claim_start("r1", "vision", usd(0.5))).admitted);
  REQUIRE(t.ledger.begin_run(claim_start("r2", "vision", usd(1.2))).admitted);

  t.clock.advance(5);
  Grant grant = t.ledger.heartbeat("r1", usd(0.25), usd(5));
  CHECK(grant.ceiling == usd(0.8));  // $2 - r2's $1.20
  CHECK(grant.allowed == usd(0.8));
  CHECK(grant.binding == kVision);
  REQUIRE(grant.scopes.size() == 1);
  CHECK(grant.scopes[0].held == usd(2));
  CHECK(grant.scopes[0].spent == usd(0.25));

  Usage usage = t.usage(kVision);
  CHECK(usage.held == usd(2));
  CHECK(usage.live == usd(0.25));
  CHECK(usage.spent == Money{});
  const RunRecord& row = t.data().runs.at("r1");
  CHECK(row.ceiling == usd(0.8));
  CHECK(row.heartbeat_at == t.clock.now());
  // $0.55 left at $3.60/h lasts 550 s, then 10 s of shutdown; claim_start's 2 h sync is stale
  // only after 6 h, which is later.
  CHECK(row.reconcile_at == doctest::Approx(t.clock.now() + 6 * 3600));
  CHECK(FakeLedgerStore::inconsistencies(t.data()).empty());
}

TEST_CASE(
    "BudgetLedger: a lost run is charged exactly its ceiling, and its final row replaces it") {
  FakeLedger t;
  t.budget(kVision, 10);
  t.ledger.begin_run(run_start("r1", "vision", usd(1)));
  t.ledger.heartbeat("r1", usd(0.64), usd(1));
  double due = t.data().runs.at("r1").reconcile_at;
  CHECK(due == doctest::Approx(t.clock.now() + 360 + 10));

  t.clock.set(due - 0.001);
  CHECK(t.ledger.reconcile_lost_runs() == 0);
  t.clock.set(due);
  CHECK(t.ledger.reconcile_lost_runs() == 1);
  const RunRecord& lost = t.data().runs.at("r1");
  CHECK(lost.status == RunStatus::lost);
  CHECK(lost.reconciled);
  CHECK(lost.spend == usd(1));
  CHECK(lost.finished_at == due);
  CHECK(lost.reason == "lost: no heartbeat");
  Usage charged = t.usage(kVision);
  CHECK(charged.spent == usd(1));
  CHECK(charged.held == Money{});
  CHECK(charged.live == Money{});

  CHECK(t.ledger.finish_run(run_final("r1", usd(0.7), RunStatus::killed)));
  CHECK(t.usage(kVision).spent == usd(0.7));
  CHECK(t.data().runs.at("r1").finished_at == due);
  CHECK_FALSE(t.ledger.finish_run(run_final("r1", usd(0.9))));
  CHECK(FakeLedgerStore::inconsistencies(t.data()).empty());
}

TEST_CASE("BudgetLedger: grants take the run's scopes' locks in one fixed order") {
  FakeLedger t;
  t.budget(kVision, 10);
  RunStart run = run_start("r1", "vision", usd(1));
  run.user = "carol";
  run.experiment = "sweep";
  run.project = "imagenet";
  t.data().locks_taken.clear();
  t.ledger.begin_run(run);
  t.ledger.heartbeat("r1", usd(0.1), usd(1));
  t.ledger.finish_run(run_final("r1", usd(0.2)));
  const std::vector<Scope> sorted = {
      kVision, kSweep, {ScopeKind::project, "imagenet"}, {ScopeKind::user, "carol"}};
  REQUIRE(t.data().locks_taken.size() == 3);
  for (const std::vector<Scope>& locked : t.data().locks_taken) CHECK(locked == sorted);
}

TEST_CASE("BudgetLedger: a refused transaction leaves the store as it was") {
  FakeLedger t;
  t.budget({ScopeKind::team, "other"}, 10);
  CHECK_THROWS_WITH_AS(t.ledger.begin_run(run_start("r1", "vision", usd(1))),
                       doctest::Contains("no budget applies"), Error);
  CHECK(t.data().runs.empty());

  t.state->caller_is_owner = false;
  CHECK_THROWS_WITH_AS(t.ledger.apply_budgets({{kVision, usd(1), Period::day, std::nullopt}}, true),
                       doctest::Contains("only alice may change budgets in fake:memory"), Error);
  CHECK(t.data().rules.size() == 1);
}

}  // namespace spendcap::testing

namespace spendcap::testing {

TEST_CASE("BudgetLedger: a locked policy's caps lower the ledger's rows wherever they are read") {
  FakeLedger t;  // its ledger writes the rows, uncapped: a row raised above the locked amount
  t.ledger.apply_budgets({{kVision, usd(1000), Period::month, usd(1000)}}, false);
  LedgerOptions options;
  options.budget_caps = {{kVision, usd(100), Period::month, usd(10)},
                         {kSweep, usd(5), Period::total, std::nullopt}};
  BudgetLedger capped(std::make_unique<FakeLedgerStore>(t.state, [&t] { return t.clock.now(); }),
                      options);

  std::vector<BudgetRule> rules = capped.budget_rules();
  REQUIRE(rules.size() == 2);
  CHECK(rules[0].scope == kVision);
  CHECK(rules[0].amount == usd(100));
  CHECK(rules[0].max_run == usd(10));
  CHECK(rules[1].scope == kSweep);  // a cap without a row is in force as it is
  CHECK(rules[1].amount == usd(5));
  CHECK(capped.budgets().at(0).rule.amount == usd(100));

  RunStart start = run_start("r1", "vision", usd(500));
  start.budget = usd(50);
  Admission admission = capped.begin_run(start);
  REQUIRE(admission.admitted);
  CHECK(admission.run_budget == usd(10));  // the locked max_run, not the row's 1000
  CHECK(admission.grant.ceiling <= usd(10));

  // Negative control: the same rows without the caps grant what the raised row allows.
  RunStart uncapped = run_start("r2", "vision", usd(500));
  uncapped.budget = usd(50);
  CHECK(t.ledger.begin_run(uncapped).run_budget == usd(50));
}

TEST_CASE("BudgetLedger: reconciling keeps a final row written while it waited for the locks") {
  // Issue 33 (the fleet test): a reconciler listed a lost run as due, then waited for its
  // scopes' locks while the run's spooled final row was replayed; it wrote its stale copy back
  // (lost, charged its ceiling), and the run's real spend was gone.
  FakeLedger t;
  t.budget(kVision, 10);
  REQUIRE(t.ledger.begin_run(run_start("r1", "vision", usd(1))).admitted);
  t.clock.advance(3600);  // long past its heartbeat and its ceiling's time: due
  t.data().on_next_lock = [&t] {
    RunRecord& row = t.data().runs.at("r1");
    row.status = RunStatus::killed;
    row.reason = "ledger-unreachable";
    row.spend = usd(0.25);
    row.finished_at = t.clock.now();
  };
  CHECK(t.ledger.reconcile_lost_runs() == 0);
  const RunRecord& row = t.data().runs.at("r1");
  CHECK(row.status == RunStatus::killed);
  CHECK(row.spend == usd(0.25));
  CHECK_FALSE(row.reconciled);
  // Without a writer in between, the same run is reconciled, once.
  REQUIRE(t.ledger.begin_run(run_start("r2", "vision", usd(1))).admitted);
  t.clock.advance(3600);
  CHECK(t.ledger.reconcile_lost_runs() == 1);
  CHECK(t.data().runs.at("r2").status == RunStatus::lost);
  CHECK(t.ledger.reconcile_lost_runs() == 0);
}

}  // namespace spendcap::testing
