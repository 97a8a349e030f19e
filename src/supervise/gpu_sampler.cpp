#include "spendcap/supervise/gpu_sampler.hpp"

#include <sys/time.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <system_error>
#include <thread>

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

// What the event loop and the NVML helper thread share. The helper never holds the lock across
// an NVML call, so the loop never waits on the driver.
struct GpuShared {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<pid_t> tree;  // the loop's latest view of the tree
  bool opened = false;      // the helper got past nvmlInit_v2 (or gave up: why_not)
  std::string why_not;
  std::optional<GpuSummary> summary;    // after the helper's latest poll
  std::optional<TimePoint> call_since;  // the helper is inside NVML since then
  std::optional<double> final_t;        // the loop asks for a last poll at this time
  bool final_done = false;
  bool stop = false;
};

// The helper thread: opens NVML (nvmlInit_v2 can take seconds without persistence mode) and polls
// every `poll`. Never joined: a call stuck in the driver cannot be cancelled, and must not hold up
// a trip, a kill or spendcap's exit; the thread and its probe are left to the process's end.
// Started from on_launched, after the guard fork (PDEATHSIG follows the forking thread).
void nvml_helper(std::shared_ptr<GpuShared> shared, GpuAllocation allocation, TimePoint launched,
                 Nanos poll) {
  std::string why_not;
  {
    std::lock_guard lock(shared->mutex);
    shared->call_since = now();
  }
  std::unique_ptr<GpuProbe> probe = open_nvml_probe(why_not);
  std::unique_ptr<GpuAccount> account;
  if (probe) account = std::make_unique<GpuAccount>(*probe, std::move(allocation));
  std::vector<pid_t> tree;
  {
    std::lock_guard lock(shared->mutex);
    shared->call_since.reset();
    shared->opened = true;
    shared->why_not = why_not;
    tree = shared->tree;
  }
  shared->changed.notify_all();
  if (!account) return;
  while (true) {
    std::optional<double> final_t;
    {
      std::unique_lock lock(shared->mutex);
      if (shared->stop) return;
      final_t = shared->final_t;
      tree = shared->tree;
      shared->call_since = now();
    }
    double t = final_t ? *final_t : to_seconds(now() - launched);
    account->sample(t, tree, wall_us());
    GpuSummary summary = account->summary();
    {
      std::unique_lock lock(shared->mutex);
      shared->call_since.reset();
      shared->summary = std::move(summary);
      if (final_t) shared->final_done = true;
    }
    shared->changed.notify_all();
    if (final_t) return;
    std::unique_lock lock(shared->mutex);
    shared->changed.wait_for(lock, poll, [&] { return shared->stop || shared->final_t; });
  }
}

// The driver samples every 1/6 s to 1 s and keeps only each process's newest sample: polling at
// about the driver's rate makes nearly every period measured (gpu/busy_window.hpp). Each poll is
// a few NVML calls per device (about 3 us each through the fake NVML, see README).
constexpr auto kPollPeriod = std::chrono::milliseconds(200);
// A helper inside NVML for longer than this is stuck: the loop stops waiting for it.
constexpr auto kStuckAfter = std::chrono::seconds(2);
// How long the end waits for the last poll (one covering the run's last partial interval).
constexpr auto kFinalWait = std::chrono::seconds(1);

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

  ~GpuSampler() override {
    if (shared_) {
      {
        std::lock_guard lock(shared_->mutex);
        shared_->stop = true;
      }
      shared_->changed.notify_all();
    }
  }

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
    shared_ = std::make_shared<GpuShared>();
    shared_->tree = tree_pids();
    GpuAllocation allocation = plan_.allocation;
    if (allocation.entries.empty()) allocation.entries = plan_.allocated;
    try {
      std::thread(nvml_helper, shared_, std::move(allocation), launched_,
                  std::min<Nanos>(interval_, kPollPeriod))
          .detach();
    } catch (const std::system_error& error) {
      // The job already runs and may hold the user's last process slot (RLIMIT_NPROC): the run
      // goes on unmeasured; enforcement needs no thread of its own.
      shared_.reset();
      report_->not_measured = std::string("cannot start the NVML thread: ") + error.what();
      return;
    }
    arm();
  }

  void on_stopping() override { stopping_ = true; }

  void on_finish() override {
    timer_.cancel();
    if (finished_) return;
    finished_ = true;
    if (!shared_ || !report_) return;
    double t = to_seconds(now() - launched_);
    input_.sample(t, {});
    std::unique_lock lock(shared_->mutex);
    shared_->tree.clear();
    shared_->final_t = t;
    shared_->changed.notify_all();
    // The last poll covers the run's last partial interval; a stuck helper is not waited for.
    if (!stuck(now())) {
      shared_->changed.wait_for(lock, kFinalWait, [&] {
        return shared_->final_done ||
               (shared_->opened && !shared_->summary && !shared_->why_not.empty()) || stuck(now());
      });
    }
    bool done = shared_->final_done;
    bool opened = shared_->opened;
    std::string why_not = shared_->why_not;
    std::optional<GpuSummary> summary = shared_->summary;
    lock.unlock();
    if (!opened) {
      report_->not_measured =
          "NVML did not answer (nvmlInit_v2 still running after " + fixed(t, 1) + " s)";
      return;
    }
    if (!why_not.empty()) {
      report_->not_measured = why_not;
      return;
    }
    if (!summary) {
      report_->not_measured = "NVML did not answer (a call stuck in the driver)";
      return;
    }
    if (!done) {
      summary->notes.push_back("an NVML call did not return: the run's last " +
                               fixed(std::max(0.0, t - last_poll_t(*summary)), 1) +
                               " s are not measured");
    }
    fill_report(std::move(*summary));
  }

 private:
  std::vector<pid_t> tree_pids() {
    std::vector<pid_t> pids;
    for (const ProcStat& member : members_()) pids.push_back(member.pid);
    return pids;
  }

  static double last_poll_t(const GpuSummary& s) {
    double t = 0;
    for (const GpuDeviceFigures& d : s.per_device) t = std::max(t, d.allocated_until);
    return t;
  }

  // Called with the lock held.
  bool stuck(TimePoint at) const {
    return shared_->call_since && at - *shared_->call_since > kStuckAfter;
  }

  void arm() {
    timer_.expires_after(interval_);
    timer_.async_wait([this](auto error) {
      if (error || finished_) return;
      if (tick()) arm();
    });
  }

  // Every interval, on the loop: hand the helper the tree, take its latest figures. Never waits
  // on NVML. False once the helper could not open NVML (no library, no driver): there is nothing
  // to sample, and the run is not woken every interval for it (the end says why not measured).
  bool tick() {
    {
      std::lock_guard lock(shared_->mutex);
      if (shared_->opened && !shared_->why_not.empty()) return false;
    }
    std::vector<pid_t> pids = tree_pids();
    double t = to_seconds(now() - launched_);
    input_.sample(t, pids);
    std::optional<GpuSummary> summary;
    bool is_stuck = false;
    {
      std::lock_guard lock(shared_->mutex);
      shared_->tree = pids;
      summary = shared_->summary;
      is_stuck = stuck(now());
    }
    if (!summary) return true;
    report_->summary = *summary;  // current while the run goes on (--metrics-dir)
    std::optional<double> utilisation;
    if (last_summary_ && !is_stuck) utilisation = utilisation_between(*last_summary_, *summary);
    last_summary_ = std::move(summary);
    idle_guard(t, utilisation);
    return true;
  }

  void idle_guard(double t, std::optional<double> utilisation) {
    if (stopping_ || !plan_.idle_below || last_summary_->per_device.empty()) return;
    if (!idle_gpu_update(idle_since_, t, utilisation, *plan_.idle_below,
                         to_seconds(plan_.idle_for))) {
      return;
    }
    reporter_.line("the run's GPUs stayed under " + fixed(*plan_.idle_below * 100, 0) +
                   "% utilisation for " + format_duration(plan_.idle_for));
    trip_(Trip{TripKind::runaway, "runaway:idle-gpu", 0});
  }

  void fill_report(GpuSummary summary) {
    GpuReport& r = *report_;
    r.summary = std::move(summary);
    if (r.summary.devices.empty()) {
      r.not_measured = "no GPU was used by the run or allocated to it";
      for (const std::string& note : r.summary.notes) {
        if (note.find("not resolved") != std::string::npos ||
            note.find("no GPU or MIG slice") != std::string::npos) {
          r.not_measured += "; " + note;
        }
      }
      return;
    }
    if (auto idle = r.summary.idle_fraction(); idle && r.summary.mean_utilisation()) {
      r.input_hint = input_hint(*r.summary.mean_utilisation(), input_.activity());
      // The GPU part of the rate buys the run's GPUs: the measured idle part of the GPU time is
      // that part of the spend (an unmeasured period is counted neither way).
      Money spend = meter_.spend_at(*meter_.ended_at());
      Money gpu_spend =
          std::min(spend, cost_of(plan_.gpu_rate_per_hour, meter_.elapsed_at(*meter_.ended_at())));
      r.idle_spend = scaled(gpu_spend, std::min(1.0, *idle));
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
  std::shared_ptr<GpuShared> shared_;
  std::optional<GpuSummary> last_summary_;
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
  // The ledger keeps busy and allocated GPU-seconds (its mean is their ratio): the busy figure
  // there is the measured mean over the allocated time, so that ratio is the measured mean.
  if (auto mean = s.mean_utilisation()) g.busy_seconds = *mean * s.allocated_seconds;
  g.idle_spend = r.idle_spend;
  g.energy_kwh = r.energy_kwh;
  g.co2_kg = r.co2_kg;
  g.energy_cost = r.energy_cost;
  std::vector<std::string> sources;
  if (!s.utilisation_source.empty()) sources.push_back(s.utilisation_source);
  if (s.busy_seconds && s.allocated_seconds > 0 &&
      s.measured_seconds < 0.95 * s.allocated_seconds) {
    sources.push_back("measured " + fixed(100 * s.measured_seconds / s.allocated_seconds, 0) +
                      "% of the time");
  }
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
  if (auto mean = s.mean_utilisation()) {
    line += ", " + fixed(*s.busy_seconds, 1) + " busy of " + fixed(s.measured_seconds, 1) +
            " measured (" + fixed(*mean * 100, 1) + "% mean utilisation, " + s.utilisation_source +
            ")";
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
