#include "spendcap/supervise/gpu_sampler.hpp"

#include <sys/time.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cmath>
#include <cstdio>

#include "spendcap/spend/meter.hpp"
#include "spendcap/supervise/reporter.hpp"
#include "spendcap/supervise/run_part.hpp"

namespace asio = boost::asio;

namespace spendcap {

namespace {

unsigned long long wall_us() {
  timeval tv{};
  gettimeofday(&tv, nullptr);
  return static_cast<unsigned long long>(tv.tv_sec) * 1000000ULL +
         static_cast<unsigned long long>(tv.tv_usec);
}

std::string fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

Money scaled(Money money, double factor) {
  return Money{static_cast<std::int64_t>(std::llround(static_cast<double>(money.micros) * factor))};
}

class GpuSampler final : public RunPart {
 public:
  GpuSampler(asio::io_context& io, const Reporter& reporter, const Meter& meter,
             const GpuPlan& plan, Nanos interval, std::function<std::vector<ProcStat>()> members,
             std::function<void(const Trip&)> trip, std::optional<GpuReport>& report)
      : timer_(io),
        reporter_(reporter),
        meter_(meter),
        plan_(plan),
        interval_(interval),
        members_(std::move(members)),
        trip_(std::move(trip)),
        report_(report) {}

  void on_launched(TimePoint at) override {
    launched_ = at;
    report_.emplace();
    report_->pue = plan_.pue;
    // Cleared at the end when busy GPU time was measured.
    if (plan_.measured_billing) {
      report_->billing_note =
          "measured billing: busy GPU time was not measured, so the run is billed as allocated";
    }
    if (!plan_.enabled) {
      report_->not_measured = "SPENDCAP_NVML_LIBRARY=none";
      return;
    }
    // NVML is opened at launch, so that its first sample is the run's start.
    std::string why_not;
    probe_ = open_nvml_probe(why_not);
    if (!probe_) {
      report_->not_measured = why_not;
      return;
    }
    account_ = std::make_unique<GpuAccount>(*probe_, plan_.allocated);
    sample();
    arm();
  }

  void on_stopping() override { stopping_ = true; }

  void on_finish() override {
    timer_.cancel();
    if (finished_) return;
    finished_ = true;
    if (!account_ || !report_) return;
    sample();  // the last interval, up to the end
    fill_report();
  }

 private:
  void arm() {
    timer_.expires_after(interval_);
    timer_.async_wait([this](auto error) {
      if (error || finished_) return;
      sample();
      idle_guard();
      arm();
    });
  }

  void sample() {
    std::vector<pid_t> pids;
    for (const ProcStat& member : members_()) pids.push_back(member.pid);
    double t = to_seconds(now() - launched_);
    account_->sample(t, pids, wall_us());
    input_.sample(t, pids);
    report_->summary = account_->summary();  // current while the run goes on (--metrics-dir)
  }

  void idle_guard() {
    if (stopping_ || !plan_.idle_below || !account_->has_devices()) return;
    double t = to_seconds(now() - launched_);
    if (!idle_gpu_update(idle_since_, t, account_->last_utilisation(), *plan_.idle_below,
                         to_seconds(plan_.idle_for))) {
      return;
    }
    reporter_.line("the run's GPUs stayed under " + fixed(*plan_.idle_below * 100, 0) +
                   "% utilisation for " + format_duration(plan_.idle_for));
    trip_(Trip{TripKind::runaway, "runaway:idle-gpu", 0});
  }

  void fill_report() {
    GpuReport& r = *report_;
    r.summary = account_->summary();
    if (r.summary.devices.empty()) {
      r.not_measured = "no GPU was used by the run or allocated to it";
      return;
    }
    if (auto mean = r.summary.mean_utilisation()) {
      r.input_hint = input_hint(*mean, input_.activity());
      // The GPU part of the rate buys the run's GPUs: the idle part of the GPU time is that part
      // of the spend.
      Money spend = meter_.spend_at(*meter_.ended_at());
      Money gpu_spend =
          std::min(spend, cost_of(plan_.gpu_rate_per_hour, meter_.elapsed_at(*meter_.ended_at())));
      r.idle_spend = scaled(gpu_spend, 1.0 - std::min(1.0, *mean));
      if (plan_.measured_billing) {
        // Measured: the GPU part by busy GPU time; never above what the allocated rate charged.
        r.billing = "measured";
        r.billing_note.clear();
        r.allocated_spend = spend;
        r.measured_spend = std::max(Money{}, spend - *r.idle_spend);
      }
    } else if (plan_.measured_billing) {
      r.billing_note = "measured billing: busy GPU time was not measured, billed as allocated";
    }
    if (r.summary.energy_joules) {
      r.energy_kwh = *r.summary.energy_joules / 3.6e6 * plan_.pue;
      if (plan_.kg_co2_per_kwh) r.co2_kg = *r.energy_kwh * *plan_.kg_co2_per_kwh;
      if (plan_.usd_per_kwh) {
        r.energy_cost = Money{
            static_cast<std::int64_t>(std::llround(*r.energy_kwh * *plan_.usd_per_kwh * 1e6))};
      }
    }
  }

  asio::steady_timer timer_;
  const Reporter& reporter_;
  const Meter& meter_;
  const GpuPlan& plan_;
  Nanos interval_;
  std::function<std::vector<ProcStat>()> members_;
  std::function<void(const Trip&)> trip_;
  std::optional<GpuReport>& report_;
  std::unique_ptr<GpuProbe> probe_;
  std::unique_ptr<GpuAccount> account_;
  InputWatch input_;
  TimePoint launched_{};
  std::optional<double> idle_since_;
  bool stopping_ = false, finished_ = false;
};

}  // namespace

std::unique_ptr<RunPart> make_gpu_sampler(asio::io_context& io, const Reporter& reporter,
                                          const Meter& meter, const GpuPlan& plan, Nanos interval,
                                          std::function<std::vector<ProcStat>()> members,
                                          std::function<void(const Trip&)> trip,
                                          std::optional<GpuReport>& report) {
  return std::make_unique<GpuSampler>(io, reporter, meter, plan, interval, std::move(members),
                                      std::move(trip), report);
}

RunGpu to_run_gpu(const GpuReport& r) {
  RunGpu g;
  g.not_measured = r.not_measured;
  if (!r.not_measured.empty()) return g;
  const GpuSummary& s = r.summary;
  g.devices = static_cast<int>(s.devices.size());
  g.allocated_seconds = s.allocated_seconds;
  g.busy_seconds = s.busy_seconds;
  g.idle_spend = r.idle_spend;
  g.energy_kwh = r.energy_kwh;
  g.co2_kg = r.co2_kg;
  g.energy_cost = r.energy_cost;
  std::vector<std::string> sources;
  if (!s.utilisation_source.empty()) sources.push_back(s.utilisation_source);
  if (!s.energy_source.empty()) sources.push_back(s.energy_source);
  if (s.shared) sources.push_back("shared");
  if (r.billing == "measured") sources.push_back("measured billing");
  for (std::size_t i = 0; i < sources.size(); ++i) g.sources += (i ? "; " : "") + sources[i];
  for (const GpuTimelinePoint& p : s.timeline)
    g.timeline.push_back({p.minute, p.utilisation, p.watts});
  return g;
}

std::string gpu_report_line(const GpuReport& r, const std::string& currency) {
  if (!r.not_measured.empty()) {
    return "GPU: not measured (" + r.not_measured + ")" +
           (r.billing_note.empty() ? "" : "\n  " + r.billing_note);
  }
  const GpuSummary& s = r.summary;
  std::string line = "GPU: " + std::to_string(s.devices.size()) +
                     (s.devices.size() == 1 ? " device, " : " devices, ");
  line += fixed(s.allocated_seconds, 1) + " GPU-seconds allocated";
  if (s.busy_seconds) {
    line += ", " + fixed(*s.busy_seconds, 1) + " busy (" + fixed(*s.mean_utilisation() * 100, 1) +
            "% mean utilisation, " + s.utilisation_source + ")";
  } else {
    line += ", busy time not measured";
  }
  if (r.idle_spend) line += ", idle spend " + format_money(*r.idle_spend, currency);
  if (r.energy_kwh) {
    line += "; energy " + fixed(*r.energy_kwh, 6) + " kWh (" + s.energy_source + ", PUE " +
            fixed(r.pue, 2) + ")";
    if (r.co2_kg) line += ", " + fixed(*r.co2_kg, 6) + " kg CO2";
    if (r.energy_cost) {
      line += ", energy cost " + format_money(*r.energy_cost, "USD") + " (not added to spend)";
    }
  } else {
    line += "; energy not measured";
  }
  if (s.shared) line += "; shared with processes outside the run";
  if (r.measured_spend && r.allocated_spend) {
    line += "\n  measured billing: " + format_money(*r.measured_spend, currency) +
            " for busy GPU time (" + format_money(*r.allocated_spend, currency) +
            " at the allocated rate)";
  }
  if (!r.billing_note.empty()) line += "\n  " + r.billing_note;
  if (r.input_hint) line += "\n  " + r.input_hint->text;
  for (const std::string& note : s.notes) line += "\n  " + note;
  return line;
}

}  // namespace spendcap
