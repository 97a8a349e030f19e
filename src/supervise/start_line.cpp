#include "spendcap/supervise/start_line.hpp"

namespace spendcap {

namespace {

// The shared scope whose remaining amount (its budget less what is spent and what other runs
// hold) is smallest, when it is below the run's own budget: what will bind first.
std::optional<ScopeUse> tightest_scope(const RunTerms& terms, const StartFacts& facts) {
  std::optional<ScopeUse> tightest;
  std::optional<Money> tightest_left = terms.run_budget;
  for (const ScopeUse& use : facts.scopes) {
    if (use.scope.kind == ScopeKind::run) continue;
    Money left = use.amount - use.spent - (use.held - facts.ceiling);
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

}  // namespace

std::string budget_reason(const Scope& scope) {
  return scope.kind == ScopeKind::run ? "budget:run" : "budget:" + to_string(scope);
}

namespace {

// "7s at $0.0700": when a run of these terms reaches CEILING less its reserve, and its spend then.
std::string trip_in_text(const RunTerms& terms, const StartFacts& facts, Money ceiling) {
  auto at = budget_trip_time(facts.launched, terms.rate_per_hour, ceiling, facts.reserve);
  Nanos in = *at - facts.launched;
  return format_duration(in) + " at " +
         format_money(cost_of(terms.rate_per_hour, in), terms.currency);
}

// The short line: what it burns, its budget, and when it trips (about 90 columns).
std::string short_start_line(const RunTerms& terms, const StartFacts& facts) {
  const std::string& currency = terms.currency;
  std::string line = "run " + terms.run_id.substr(0, 8) + " started: burn " +
                     format_money(terms.rate_per_hour, currency) + "/h";
  if (terms.run_budget) line += ", budget " + format_money(*terms.run_budget, currency);
  std::string trips = terms.mode == Mode::warn ? "would trip" : "trips";
  auto trip_in = [&](Money ceiling) { return trip_in_text(terms, facts, ceiling); };
  std::optional<ScopeUse> tightest = tightest_scope(terms, facts);
  if (terms.rate_per_hour.micros == 0) {
    line += "; burn rate 0: it never trips";
  } else if (!facts.binding && tightest) {
    Money left = tightest->amount - tightest->spent - (tightest->held - facts.ceiling);
    line += "; " + trips + " in " + trip_in(left) + " (" + budget_reason(tightest->scope) + ")";
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
  std::optional<ScopeUse> tightest = tightest_scope(terms, facts);
  if (terms.rate_per_hour.micros == 0) {
    line += "; burn rate 0: it never trips";
  } else if (!facts.binding && tightest) {
    // A shared budget's remaining amount binds before the run's own: it is what stops the run,
    // unless other runs release some.
    Money left = tightest->amount - tightest->spent - (tightest->held - facts.ceiling);
    line += "; " + trips + " in " + trip_in(left) + " (" + budget_reason(tightest->scope) + ": " +
            format_money(left, currency) + " left of " + format_money(tightest->amount, currency) +
            ")";
  } else if (facts.binding) {
    // The budget that limits the grant is what stops the run, unless other runs release some.
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
