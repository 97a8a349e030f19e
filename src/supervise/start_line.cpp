#include "spendcap/supervise/start_line.hpp"

#include <algorithm>

namespace spendcap {

namespace {

bool is_shared(const Scope& scope) {
  return scope.kind != ScopeKind::run && scope.kind != ScopeKind::job;
}

// What a shared scope has left for this run if the other runs keep what they hold: its budget
// less what is spent and what other runs hold.
Money left_for_run(const ScopeUse& use, const StartFacts& facts) {
  return use.amount - use.spent - (use.held - facts.ceiling);
}

// What the run can expect to spend of a shared scope: what is left for it, and with other runs on
// the scope no more than an equal part of what no run has spent yet (they claim theirs as it
// does, at each heartbeat: grant_rule.hpp's fair share).
Money expected_of(const ScopeUse& use, const StartFacts& facts) {
  Money left = left_for_run(use, facts);
  std::int64_t others = use.other_runs.value_or(0);
  if (others <= 0) return left;
  return std::min(left, Money{(use.amount - use.spent).micros / (others + 1)});
}

const ScopeUse* use_of(const StartFacts& facts, const Scope& scope) {
  for (const ScopeUse& use : facts.scopes) {
    if (use.scope == scope) return &use;
  }
  return nullptr;
}

// The shared scope whose expected amount is smallest, when it is below the run's own budget: what
// will bind first.
std::optional<ScopeUse> tightest_scope(const RunTerms& terms, const StartFacts& facts) {
  std::optional<ScopeUse> tightest;
  std::optional<Money> tightest_left = terms.run_budget;
  for (const ScopeUse& use : facts.scopes) {
    if (!is_shared(use.scope)) continue;
    Money left = expected_of(use, facts);
    if (!tightest_left || left < *tightest_left) {
      tightest = use;
      tightest_left = left;
    }
  }
  if (tightest &&
      !budget_trip_time(facts.launched, terms.rate_per_hour, *tightest_left, facts.reserve)) {
    return std::nullopt;
  }
  return tightest;
}

std::string plural_runs(std::int64_t count) {
  return std::to_string(count) + " other run" + (count == 1 ? "" : "s");
}

// Who else is on a shared scope, for the short line: ", a fair share with 2 other runs".
std::string sharing_text(const ScopeUse& use) {
  std::int64_t others = use.other_runs.value_or(0);
  if (others <= 0) return "";
  return ", a fair share with " + plural_runs(others);
}

}  // namespace

std::string budget_reason(const Scope& scope) {
  return scope.kind == ScopeKind::run ? "budget:run" : "budget:" + to_string(scope);
}

namespace {

// "7s at $0.07": when a run of these terms reaches CEILING less its reserve, and its spend then.
std::string trip_in_text(const RunTerms& terms, const StartFacts& facts, Money ceiling) {
  auto at = budget_trip_time(facts.launched, terms.rate_per_hour, ceiling, facts.reserve);
  Nanos in = *at - facts.launched;
  return format_duration(in) + " at " +
         format_money(cost_of(terms.rate_per_hour, in), terms.currency);
}

// When and by what a run on a shared scope trips. `use`: the scope that binds (the grant's) or
// will bind first (the tightest); `bound`: the grant was limited by it.
struct SharedTrip {
  Money expected;         // what the run will have spent, less its reserve, when it trips
  bool estimate = false;  // depends on the other runs (a fair share, or the only run so far)
  std::string brief;      // after the reason, in the short line
  std::string verbose;    // after the reason, in the --verbose line
};

SharedTrip shared_trip(const ScopeUse& use, const StartFacts& facts, bool bound,
                       const std::string& currency) {
  std::int64_t others = use.other_runs.value_or(0);
  std::string of_budget = " of " + format_money(use.amount, currency);
  SharedTrip trip;
  if (bound && !facts.fair_share) {
    // The grant took all that was free: the run holds the rest, and picks up what other runs
    // release when they finish.
    trip.expected = facts.allowed;
    trip.brief = ": holds the rest";
    trip.verbose = ": holds the rest, " + format_money(facts.allowed, currency) + of_budget;
    if (use.held > facts.ceiling) {
      trip.verbose += "; other runs hold " + format_money(use.held - facts.ceiling, currency);
    }
    return trip;
  }
  trip.expected = expected_of(use, facts);
  Money unspent = use.amount - use.spent;
  std::string holds = bound ? "; holds " + format_money(facts.allowed, currency) +
                                  " so far, raised at each heartbeat"
                            : "";
  if (others > 0) {
    trip.estimate = true;
    trip.brief = sharing_text(use);
    trip.verbose = ": a fair share of its " + format_money(unspent, currency) + " left with " +
                   plural_runs(others) + holds;
  } else {
    trip.estimate = bound;
    trip.brief = bound ? ", the only run on it so far" : "";
    trip.verbose = ": " + format_money(trip.expected, currency) + " left" + of_budget +
                   (bound ? ", the only run on it so far" : "") + holds;
  }
  return trip;
}

// "; trips in ~15s at $0.15 (budget:experiment:sweep, a fair share with 2 other runs)", or
// "" when no shared scope binds first.
std::string shared_trip_text(const RunTerms& terms, const StartFacts& facts, bool verbose) {
  const ScopeUse* use = nullptr;
  bool bound = false;
  std::optional<ScopeUse> tightest;
  if (facts.binding) {
    if (!is_shared(*facts.binding)) return "";
    use = use_of(facts, *facts.binding);
    bound = true;
  }
  if (!use && !facts.binding) {
    tightest = tightest_scope(terms, facts);
    if (tightest) use = &*tightest;
  }
  if (!use) return "";
  SharedTrip trip = shared_trip(*use, facts, bound, terms.currency);
  std::string trips = terms.mode == Mode::warn ? "would trip" : "trips";
  return "; " + trips + " in " + (trip.estimate ? "~" : "") +
         trip_in_text(terms, facts, trip.expected) + " (" + budget_reason(use->scope) +
         (verbose ? trip.verbose : trip.brief) + ")";
}

// The short line: what it burns, its budget, and when it trips (about 90 columns).
std::string short_start_line(const RunTerms& terms, const StartFacts& facts) {
  const std::string& currency = terms.currency;
  std::string line = "run " + terms.run_id.substr(0, 8) + " started: burn " +
                     format_money(terms.rate_per_hour, currency) + "/h";
  if (terms.run_budget) line += ", budget " + format_money(*terms.run_budget, currency);
  std::string trips = terms.mode == Mode::warn ? "would trip" : "trips";
  auto trip_in = [&](Money ceiling) { return trip_in_text(terms, facts, ceiling); };
  std::string shared = shared_trip_text(terms, facts, false);
  if (terms.rate_per_hour.micros == 0) {
    line += "; burn rate 0: it never trips";
  } else if (!shared.empty()) {
    line += shared;
  } else if (facts.binding) {
    line +=
        "; " + trips + " in " + trip_in(facts.allowed) + " (" + budget_reason(*facts.binding) + ")";
  } else if (terms.run_budget) {
    line += "; " + trips + " in " + trip_in(*terms.run_budget);
  } else {
    line += "; no budget of its own, ceiling " + format_money(facts.ceiling, currency) + " so far";
  }
  if (terms.mode == Mode::warn) line += " (warn mode)";
  return line;
}

}  // namespace

std::string start_line(const RunTerms& terms, const StartFacts& facts) {
  if (!terms.verbose) return short_start_line(terms, facts);
  const std::string& currency = terms.currency;
  std::string line = "run " + terms.run_id.substr(0, 8) + " started" +
                     (facts.label.empty() ? "" : " (" + facts.label + ")") + ": burn " +
                     format_money(terms.rate_per_hour, currency) + "/h";
  if (terms.run_budget) line += ", budget " + format_money(*terms.run_budget, currency);
  line += ", reserve " + format_money(facts.reserve, currency) + " (grace " +
          format_duration(facts.on_trip.grace) + " + kill-after " +
          format_duration(facts.on_trip.kill_after) + " + 1s)";
  std::string trips = terms.mode == Mode::warn ? "would trip" : "trips";
  auto trip_in = [&](Money ceiling) { return trip_in_text(terms, facts, ceiling); };
  // A shared budget binds before the run's own: it is what stops the run, unless other runs
  // release some.
  std::string shared = shared_trip_text(terms, facts, true);
  if (terms.rate_per_hour.micros == 0) {
    line += "; burn rate 0: it never trips";
  } else if (!shared.empty()) {
    line += shared;
  } else if (facts.binding) {
    // The budget that limits the grant is what stops the run.
    line +=
        "; " + trips + " in " + trip_in(facts.allowed) + " (" + budget_reason(*facts.binding) + ")";
  } else if (terms.run_budget) {
    line += "; its budget " + trips + " in " + trip_in(*terms.run_budget) + "; ceiling " +
            format_money(facts.ceiling, currency) + " granted so far";
  } else {
    line += "; ceiling " + format_money(facts.ceiling, currency) +
            " granted so far, raised at each heartbeat while the budgets allow";
  }
  if (terms.mode == Mode::warn) line += " (warn mode: nothing is stopped)";
  if (!facts.isolation.empty()) line += "; isolation: " + facts.isolation;
  if (!facts.ledger.empty()) line += "; ledger " + facts.ledger;
  return line;
}

}  // namespace spendcap
