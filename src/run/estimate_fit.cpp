#include "spendcap/run/estimate_fit.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "spendcap/base/duration.hpp"
#include "spendcap/base/error.hpp"
#include "spendcap/report/estimate.hpp"

namespace spendcap {

Error usage_error(const std::string& what, const std::string& why, const std::string& hint) {
  return Error(what, why, hint, ExitCode::internal);
}

double parse_number(const std::string& text, const std::string& flag, bool zero_ok) {
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(value) || value < 0 ||
      (!zero_ok && value == 0)) {
    throw usage_error(flag + " " + text, zero_ok ? "not a number >= 0" : "not a number > 0",
                      "write a plain number, e.g. 0.8 or 1e9");
  }
  return value;
}

double seconds_of(const std::string& text, const std::string& flag) {
  // A bare number is seconds.
  char* end = nullptr;
  double plain = std::strtod(text.c_str(), &end);
  if (!text.empty() && end == text.c_str() + text.size() && std::isfinite(plain) && plain > 0) {
    return plain;
  }
  double seconds = to_seconds(parse_duration_or_throw(text, flag));
  if (seconds <= 0) throw usage_error(flag + " " + text, "must be above 0");
  return seconds;
}

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

std::vector<BudgetFit> budget_fits(Ledger& ledger, const std::vector<Scope>& scopes, double cost) {
  std::vector<BudgetFit> fits;
  std::vector<BudgetView> views = ledger.budgets();
  for (const Scope& scope : scopes) {
    for (const BudgetView& view : views) {
      if (view.rule.scope != scope) continue;
      double remaining = view.remaining().units();
      fits.push_back({to_string(scope) + " (" + to_string(view.rule.period) + ")", remaining,
                      cost <= remaining});
    }
  }
  return fits;
}

void require_estimate_fits(const RunSettings& settings, Ledger& ledger) {
  if (!settings.estimate) return;
  const StepEstimateFlags& flags = *settings.estimate;
  StepEstimate e =
      estimate_from_steps(flags.step_seconds, flags.steps, 1, settings.rate_per_hour.units());
  const std::string& currency = settings.loaded.policy.currency;
  std::string estimate = format_money(e.cost, currency) + " (" + fixed(e.wall_hours, 3) + " h at " +
                         format_money(settings.rate_per_hour.units(), currency) + "/h)";
  if (settings.budget && e.cost > settings.budget->units()) {
    throw Error(flags.steps_text,
                "the estimate " + estimate + " does not fit --budget " +
                    format_money(settings.budget->units(), currency),
                "raise --budget or shorten the run", ExitCode::refused);
  }
  for (const BudgetFit& f : budget_fits(ledger, named_scopes(settings.identity), e.cost)) {
    if (!f.fits) {
      throw Error(flags.steps_text,
                  "the estimate " + estimate + " does not fit " + f.scope + ", " +
                      format_money(f.remaining, currency) + " remaining",
                  "shorten the run or ask for more budget", ExitCode::refused);
    }
  }
}

}  // namespace spendcap
