// Who may stop and accept whose runs (ledger/stop_rule.hpp): the pure rule, and BudgetLedger
// enforcing it over an in-memory store for a caller that does not own the ledger.
#include <doctest/doctest.h>

#include <memory>

#include "fakes/fake_ledger_store.hpp"
#include "ledger/ledger_conformance.hpp"
#include "spendcap/base/error.hpp"
#include "spendcap/ledger/budget_ledger.hpp"
#include "spendcap/ledger/stop_rule.hpp"

namespace spendcap::testing {
namespace {

Caller caller(const std::string& user, std::vector<std::string> groups = {}) {
  Caller c;
  c.user = user;
  c.in_group = [groups](const std::string& g) {
    return std::find(groups.begin(), groups.end(), g) != groups.end();
  };
  return c;
}

RunRecord run_of(const std::string& id, const std::string& user, const std::string& team) {
  RunRecord run;
  run.id = id;
  run.user = user;
  run.team = team;
  return run;
}

// team vision names members (group vis); team open does not; experiment e1 has an open budget.
RuleOf rules() {
  return [](const Scope& scope) -> std::optional<BudgetRule> {
    if (scope == Scope{ScopeKind::team, "vision"}) {
      return BudgetRule{scope, usd(10), Period::month, std::nullopt, {"vis"}};
    }
    if (scope == Scope{ScopeKind::team, "open"} || scope == Scope{ScopeKind::experiment, "e1"}) {
      return BudgetRule{scope, usd(10), Period::month, std::nullopt};
    }
    return std::nullopt;
  };
}

}  // namespace

TEST_CASE("stop rule: a run is its user's, its team members', and the owner's") {
  RunRecord vision = run_of("r1", "alice", "vision");
  Asker bob{caller("bob"), false};
  Asker member{caller("carol", {"vis"}), false};
  CHECK(why_not_act_on_run(Asker{caller("alice"), false}, vision, rules()).empty());
  CHECK(why_not_act_on_run(member, vision, rules()).empty());
  CHECK(why_not_act_on_run(Asker{caller("bob"), true}, vision, rules()).empty());
  CHECK(why_not_act_on_run(bob, vision, rules()) == "bob is not in the group vis of team:vision");
  // An open team takes anyone; a run without a team is its user's alone.
  CHECK(why_not_act_on_run(bob, run_of("r2", "alice", "open"), rules()).empty());
  CHECK(why_not_act_on_run(bob, run_of("r3", "alice", ""), rules()) ==
        "it is alice's and has no team");
  // Accepting takes a named member: not everyone an open team takes.
  CHECK(!why_not_accept_run(bob, run_of("r2", "alice", "open"), rules()).empty());
  CHECK(why_not_accept_run(member, vision, rules()).empty());
  CHECK(!why_not_accept_run(bob, vision, rules()).empty());
}

// Issue 29: bob's order on alice's open-team key refused her next runs, and she could not clear
// it; another team's run could join her key.
TEST_CASE("stop rule: a job key is its first run's user's, or its team's named members'") {
  Asker bob{caller("bob"), false};
  Asker alice{caller("alice"), false};
  Asker member{caller("carol", {"vis"}), false};
  const Scope key{ScopeKind::job, "k"};
  auto keyed = [](const std::string& id, const std::string& user, const std::string& team) {
    RunRecord run = run_of(id, user, team);
    run.job_key = "k";
    run.status = RunStatus::succeeded;
    return run;
  };
  auto order = [&](const Asker& who, std::vector<RunRecord> job) {
    return why_not_order_scope(who, key, rules(), std::nullopt, job);
  };
  RunRecord open_key = keyed("r1", "alice", "open");
  RunRecord vision_key = keyed("r2", "alice", "vision");
  CHECK(order(bob, {open_key}).find("job key k is alice's of team open: only alice") == 0);
  CHECK(order(alice, {open_key}).empty());
  CHECK(order(member, {vision_key}).empty());
  CHECK_FALSE(order(bob, {vision_key}).empty());
  CHECK(names_caller(alice, key, rules(), std::nullopt, {open_key}));
  CHECK_FALSE(names_caller(bob, key, rules(), std::nullopt, {open_key}));
  CHECK(names_caller(member, key, rules(), std::nullopt, {vision_key}));
  CHECK_FALSE(names_caller(member, key, rules(), std::nullopt, {open_key}));

  RunRecord joiner = keyed("r3", "bob", "open");
  CHECK(why_not_join_job({open_key, joiner}, joiner).find("job key k is team open's, alice's") ==
        0);
  joiner.user = "alice";
  CHECK(why_not_join_job({open_key, joiner}, joiner).empty());
  joiner.team = "vision";
  CHECK_FALSE(why_not_join_job({open_key, joiner}, joiner).empty());
  // A refused run never held the key: the first admitted one owns it.
  RunRecord refused = keyed("r0", "bob", "open");
  refused.status = RunStatus::refused;
  refused.started_at = -1;
  CHECK(job_key_owner({refused, open_key})->id == "r1");
  CHECK(job_key_owner({refused}) == nullptr);
}

TEST_CASE("stop rule: an order's later runs need someone who speaks for the scope") {
  Asker bob{caller("bob"), false};
  Asker member{caller("carol", {"vis"}), false};
  auto order = [&](const Asker& who, Scope scope, std::vector<RunRecord> job = {}) {
    return why_not_order_scope(who, scope, rules(), std::nullopt, job);
  };
  CHECK(order(bob, {ScopeKind::user, "bob"}).empty());
  CHECK(order(bob, {ScopeKind::user, "alice"}).find("only alice") != std::string::npos);
  CHECK(order(bob, {ScopeKind::team, "open"}).empty());
  CHECK(order(bob, {ScopeKind::team, "vision"}).find("vis") != std::string::npos);
  CHECK(order(member, {ScopeKind::team, "vision"}).empty());
  CHECK(order(bob, {ScopeKind::experiment, "e1"}).find("ledger's owner") != std::string::npos);
  CHECK(order(Asker{caller("bob"), true}, {ScopeKind::experiment, "e1"}).empty());
  CHECK(order(bob, {ScopeKind::job, "j"}).find("no run has this job key") != std::string::npos);
  CHECK(order(bob, {ScopeKind::job, "j"}, {run_of("r4", "bob", "")}).empty());
  CHECK(!order(bob, {ScopeKind::job, "j"}, {run_of("r4", "bob", ""), run_of("r5", "al", "")})
             .empty());
  // Clearing: by name only (an open team has nobody but its placer and the owner).
  CHECK(names_caller(bob, {ScopeKind::user, "bob"}, rules(), std::nullopt));
  CHECK(!names_caller(bob, {ScopeKind::team, "open"}, rules(), std::nullopt));
  CHECK(names_caller(member, {ScopeKind::team, "vision"}, rules(), std::nullopt));
  CHECK(names_caller(bob, {ScopeKind::run, "r6"}, rules(), run_of("r6", "bob", "")));
}

TEST_CASE("BudgetLedger: a caller who is not the owner reaches only the runs it may stop") {
  auto state = std::make_shared<FakeLedgerState>();
  TestClock clock{unix_time(2024, 1, 31, 12)};
  auto open = [&](Caller who) {
    LedgerOptions options;
    options.caller = std::move(who);
    return std::make_unique<BudgetLedger>(
        std::make_unique<FakeLedgerStore>(state, [&clock] { return clock.now(); }), options);
  };
  auto owner = open(caller("root"));
  owner->apply_budgets(
      {{{ScopeKind::team, "vision"}, usd(10), Period::month, std::nullopt, {"vis"}}}, false);
  RunStart start = run_start("r1", "vision", usd(1));
  start.user = "alice";
  start.experiment = "e1";
  REQUIRE(owner->begin_run(start).admitted);
  state->caller_is_owner = false;
  auto bob = open(caller("bob"));
  for (Scope scope : {Scope{ScopeKind::team, "vision"}, Scope{ScopeKind::experiment, "e1"},
                      Scope{ScopeKind::user, "alice"}, Scope{ScopeKind::run, "r1"}}) {
    CAPTURE(to_string(scope));
    CHECK_THROWS_WITH_AS(bob->place_stop_order(scope, "", "bob@h"), doctest::Contains("r1"), Error);
  }
  CHECK(bob->active_stop_orders().empty());
  bob->place_stop_order({ScopeKind::user, "bob"}, "", "bob@h");
  CHECK(bob->clear_stop_orders({ScopeKind::user, "bob"}) == 1);
  // The negative control: a member's order reaches the run; bob may not clear it, alice may not
  // either (she is not in vis), the member may.
  auto carol = open(caller("carol", {"vis"}));
  carol->place_stop_order({ScopeKind::team, "vision"}, "", "carol@h");
  CHECK_THROWS_WITH_AS(bob->clear_stop_orders({ScopeKind::team, "vision"}),
                       doctest::Contains("placed by carol@h"), Error);
  CHECK(carol->clear_stop_orders({ScopeKind::team, "vision"}) == 1);
}

}  // namespace spendcap::testing
