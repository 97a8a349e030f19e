// What every part of a run (run_part.hpp) may read about the run: its id, currency, burn rate, its
// own budget, the warning thresholds, the mode and the sampling interval. SupervisorPlan derives
// from RunTerms and from each part's own plan, so `spendcap run` fills one plan while each part
// takes the terms and its own plan, never the whole SupervisorPlan.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "spendcap/base/duration.hpp"
#include "spendcap/base/money.hpp"
#include "spendcap/policy/policy.hpp"

namespace spendcap {

struct RunTerms {
  std::string run_id;
  std::string currency = "USD";
  Money rate_per_hour;
  std::optional<Money> run_budget;  // the run's own budget (for its warnings), if it has one
  std::vector<double> warn_at = {0.5, 0.8, 0.95};
  Mode mode = Mode::enforce;
  Nanos interval = std::chrono::seconds(1);
  bool verbose = false;  // --verbose: the start line in full, the guards' detectors
};

}  // namespace spendcap
