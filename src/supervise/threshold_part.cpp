#include "spendcap/supervise/threshold_part.hpp"

#include <boost/asio/steady_timer.hpp>
#include <cstdint>

#include "spendcap/spend/meter.hpp"
#include "spendcap/spend/trip.hpp"
#include "spendcap/supervise/reporter.hpp"

namespace asio = boost::asio;

namespace spendcap {

namespace {

std::string percent(double fraction) {
  return std::to_string(static_cast<int>(fraction * 100 + 0.5)) + "%";
}

class RunThresholds final : public RunPart {
 public:
  RunThresholds(asio::io_context& io, const Reporter& reporter, const Meter& meter,
                const RunTerms& terms, Notifier& notifier)
      : timer_(io),
        reporter_(reporter),
        meter_(meter),
        plan_(terms),
        tracker_(terms.warn_at),
        notifier_(notifier) {}
  void on_launched(TimePoint) override { arm(); }
  // A threshold the spend reached by the trip is announced even when its timer and the trip's
  // fall due together (a 50% warning of a run that trips at half its budget): which of the two
  // timers runs first must not decide whether the warning is sent.
  void on_stopping() override {
    if (!stopped_ && plan_.run_budget && meter_.launched_at()) announce(meter_.spend_at(now()));
    stop();
  }
  void on_finish() override { stop(); }

 private:
  void stop() {
    stopped_ = true;
    timer_.cancel();
  }

  void arm() {
    if (stopped_ || !plan_.run_budget || !meter_.launched_at()) return;
    auto fraction = tracker_.next();
    if (!fraction) return;
    Money at_spend = Money{static_cast<std::int64_t>(*fraction * plan_.run_budget->micros)};
    auto at = ceiling_reached_time(*meter_.launched_at(), plan_.rate_per_hour, at_spend);
    if (!at) return;
    timer_.expires_at(*at);
    timer_.async_wait([this](auto error) {
      if (error || stopped_) return;
      announce(meter_.spend_at(now()));
      arm();
    });
  }

  void announce(Money spend) {
    if (tracker_.crossed(spend, *plan_.run_budget).empty()) return;
    std::string line = spent_of(spend, *plan_.run_budget, "run budget", plan_.currency);
    reporter_.line(line);
    notifier_.notify(RunEvent{"warning", line.substr(0, line.find(':')), "run", line, spend});
  }

  asio::steady_timer timer_;
  const Reporter& reporter_;
  const Meter& meter_;
  const RunTerms& plan_;
  ThresholdTracker tracker_;
  Notifier& notifier_;
  bool stopped_ = false;
};

}  // namespace

std::string spent_of(Money spent, Money budget, const std::string& what,
                     const std::string& currency) {
  double fraction = budget.micros > 0 ? static_cast<double>(spent.micros) / budget.micros : 0;
  return percent(fraction) + " of the " + what + " spent: " + format_money(spent, currency) +
         " of " + format_money(budget, currency);
}

std::unique_ptr<RunPart> make_threshold_part(asio::io_context& io, const Reporter& reporter,
                                             const Meter& meter, const RunTerms& terms,
                                             Notifier& notifier) {
  return std::make_unique<RunThresholds>(io, reporter, meter, terms, notifier);
}

}  // namespace spendcap
