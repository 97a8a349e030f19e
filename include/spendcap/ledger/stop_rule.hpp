// Who may stop and accept whose runs (issue 19, item 2): the one rule behind `spendcap stop`,
// `stop --clear` and `spendcap accept`, checked by BudgetLedger inside the transaction that writes
// the order or the result (so a run admitted meanwhile cannot slip past it). PostgreSQL enforces
// the same rule in its functions, by login role (postgres_access.cpp).
//
//   - A caller may stop a run when it is the ledger's owner, the run's own user, or a member of
//     the run's team who also passes every budget of the run that names members. A team is open
//     (everyone is its member) unless its budget names members; a run without a team is only its
//     user's and the owner's. Accepting a run's result takes a member the team's budget names
//     (an open team's runs are accepted by their user and the owner only).
//   - An order on a scope reaches the running runs in it and every later run in it until cleared,
//     so placing one needs both: the caller may act on every running run it reaches, and the
//     caller speaks for the scope's future runs (see may_order_scope).
//   - An order may be cleared by the owner, by whoever placed every active order on the scope,
//     and by those who speak for the scope by name (the user themself, the members a budget
//     names, the run's own user, a job key's own user): not by everyone an open team takes.
//   - A job key belongs to its first admitted run's team and user: a run of another team or
//     another user cannot join it (hold, spend or resize its budget), and an order on it takes
//     its user or a member its team's budget names (not everyone an open team takes).
//
// Pure: the caller and the budgets in force are given.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "spendcap/ledger/ledger.hpp"
#include "spendcap/ledger/ledger_store.hpp"

namespace spendcap {

// The calling process (Caller, ledger.hpp): its real uid's name and its real and supplementary
// groups (never the effective gid, which a setgid install holds and no user is in).
Caller current_caller();

// A caller and whether it owns the ledger (then it may do anything).
struct Asker {
  Caller caller;
  bool owner = false;
};

// The budget in force for a scope (none: the scope has no budget).
using RuleOf = std::function<std::optional<BudgetRule>(const Scope&)>;

// Why `caller` may not act on `run` ("" when it may): names the groups it is not in.
std::string why_not_act_on_run(const Asker& asker, const RunRecord& run, const RuleOf& rule_of);

// Why `caller` may not accept `run`'s result ("" when it may): as why_not_act_on_run, except that
// an open team makes nobody its member: accepting is a claim about someone's work, so it takes
// the run's user, the owner, or a member its team's budget names.
std::string why_not_accept_run(const Asker& asker, const RunRecord& run, const RuleOf& rule_of);

// Why `caller` may not place an order on `scope` for the runs that start in it later ("" when it
// may): a user's scope is theirs alone; a team's, its members' (anyone's when open); an
// experiment's or project's, the members its budget names (else the owner's); a run's, whoever
// may act on it; a job's, whoever may act on each of its runs (`job_runs`, finished included).
std::string why_not_order_scope(const Asker& asker, const Scope& scope, const RuleOf& rule_of,
                                const std::optional<RunRecord>& run,
                                const std::vector<RunRecord>& job_runs);

// Whether `caller` speaks for `scope` by name, for clearing (see the top). `job_runs`: a job
// key's runs, finished included.
bool names_caller(const Asker& asker, const Scope& scope, const RuleOf& rule_of,
                  const std::optional<RunRecord>& run, const std::vector<RunRecord>& job_runs = {});

// The run a job key belongs to: the first of `job_runs` admitted (a refused run never held the
// key), by start time then id; nullptr when none was.
const RunRecord* job_key_owner(const std::vector<RunRecord>& job_runs);

// Why `run` may not join its job key ("" when it may): the key's first run is of another team or
// another user. `job_runs`: the key's runs (`run` itself may be among them).
std::string why_not_join_job(const std::vector<RunRecord>& job_runs, const RunRecord& run);

// The refusal of `run` on a job key that is `owner`'s (its id, team and user).
std::string job_taken_message(const RunRecord& owner, const RunRecord& run);

}  // namespace spendcap
