#include "spendcap/guards/run_guard.hpp"

#include <cstdio>

namespace spendcap {

namespace {

class ProjectionGuard final : public RunGuard {
 public:
  explicit ProjectionGuard(bool require_fit) : require_fit_(require_fit) {}
  GuardVerdict check(const GuardView& view) override {
    if (said_ || !view.run_budget || !view.progress) return GuardVerdict::none();
    auto total = projected_total(*view.progress);
    if (!total || *total <= *view.run_budget) return GuardVerdict::none();
    said_ = true;
    const ProgressState& p = *view.progress;
    std::string figures = "projected total " + format_money(*total, view.currency) + " (step " +
                          std::to_string(*p.step) + " of " + std::to_string(*p.total_steps) +
                          " after " + format_money(p.spend_at_last_line, view.currency) +
                          ") exceeds the run budget " +
                          format_money(*view.run_budget, view.currency);
    if (require_fit_) {
      return {GuardVerdict::Act::stop, "runaway:will-not-fit",
              "the run will not fit its budget: " + figures + "; --require-fit stops it now"};
    }
    return {GuardVerdict::Act::warn, "",
            "warning: the run will not fit its budget: " + figures +
                "; the budget stops it before it finishes (--require-fit stops it now)"};
  }

 private:
  bool require_fit_;
  bool said_ = false;
};

class StallGuard final : public RunGuard {
 public:
  explicit StallGuard(Nanos after) : after_(after) {}
  GuardVerdict check(const GuardView& view) override {
    bool any = view.progress && view.progress->last_line_at;
    TimePoint since = any ? *view.progress->last_line_at : view.launched_at;
    if (view.now - since < after_) return GuardVerdict::none();
    return {GuardVerdict::Act::stop, "runaway:stall",
            std::string(any ? "no progress line for " : "no progress line since launch, ") +
                format_duration(view.now - since) + " (--stall-after " + format_duration(after_) +
                ")"};
  }

 private:
  Nanos after_;
};

class BurnRateGuard final : public RunGuard {
 public:
  BurnRateGuard(double factor, Money expected, std::string experiment)
      : factor_(factor), expected_(expected), experiment_(std::move(experiment)) {}
  GuardVerdict check(const GuardView& view) override {
    if (said_) return GuardVerdict::none();
    said_ = true;
    double limit = factor_ * static_cast<double>(expected_.micros);
    if (static_cast<double>(view.rate_per_hour.micros) <= limit) return GuardVerdict::none();
    char factor[32];
    std::snprintf(factor, sizeof factor, "%g", factor_);
    return {GuardVerdict::Act::warn, "",
            "warning: burn-rate anomaly: " + format_money(view.rate_per_hour, view.currency) +
                "/h is above " + factor + " x the " + format_money(expected_, view.currency) +
                "/h experiment " + experiment_ + " expects"};
  }

 private:
  double factor_;
  Money expected_;
  std::string experiment_;
  bool said_ = false;
};

}  // namespace

std::unique_ptr<RunGuard> make_projection_guard(bool require_fit) {
  return std::make_unique<ProjectionGuard>(require_fit);
}
std::unique_ptr<RunGuard> make_stall_guard(Nanos after) {
  return std::make_unique<StallGuard>(after);
}
std::unique_ptr<RunGuard> make_burn_rate_guard(double factor, Money expected_per_hour,
                                               std::string experiment) {
  return std::make_unique<BurnRateGuard>(factor, expected_per_hour, std::move(experiment));
}

}  // namespace spendcap
