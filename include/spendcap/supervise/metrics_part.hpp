// Metrics for monitoring (--metrics-dir, the policy's metrics_dir): a RunPart that writes the run's
// figures as one Prometheus text-format file per run, spendcap_<run id>.prom, for node_exporter's
// textfile collector. The file is replaced atomically (temp file + rename) every interval, so a
// reader never sees a part of it, and removed when the run ends; the run's spend is then added to
// its team's summary file, spendcap_team_<team>.prom, under a lock file (flock), so that runs of
// one team ending together lose no update. A figure not measured (GPU utilisation, energy) is left
// out, never written as 0.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "spendcap/base/money.hpp"

namespace boost::asio {
class io_context;
}

namespace spendcap {

class Meter;
class RunPart;
struct GpuReport;
struct SupervisorPlan;

struct MetricsPlan {
  std::string dir;  // "": no metrics files
  std::string team, experiment;
};

// One snapshot of a run, as its file says it.
struct RunMetrics {
  std::string run_id, team, experiment, currency = "USD";
  Money spend, ceiling, rate_per_hour;
  std::optional<Money> budget;
  std::optional<double> gpu_utilisation;  // 0..1
  std::optional<double> energy_joules;    // x PUE
};

// A label value escaped as the exposition format asks: backslash, double quote and line feed.
std::string prometheus_label_value(const std::string& text);
// The run's file, in the text exposition format.
std::string run_metrics_text(const RunMetrics& metrics);
// The team's summary after one more run that spent `spend`: `before` is the file as it was ("" for
// none); the runs finished and spend total it holds are read back and added to.
std::string team_summary_text(const std::string& before, const std::string& team,
                              const std::string& currency, Money spend);
// "spendcap_<run id>.prom", "spendcap_team_<team>.prom": bytes outside [A-Za-z0-9_.-] as %XX.
std::string run_metrics_file(const std::string& run_id);
std::string team_metrics_file(const std::string& team);

// The part. `ceiling` gives the run's current ceiling; `gpu` is the GPU sampler's report (its
// summary kept current while the run goes on), none where GPUs are not measured.
std::unique_ptr<RunPart> make_metrics_part(boost::asio::io_context& io, const Meter& meter,
                                           const SupervisorPlan& plan,
                                           std::function<Money()> ceiling,
                                           const std::optional<GpuReport>& gpu);

}  // namespace spendcap
