// Metrics for monitoring (--metrics-dir, the policy's metrics_dir): a RunPart that writes the run's
// figures as one Prometheus text-format file per run, spendcap_<run id>.prom, for node_exporter's
// textfile collector. The file is replaced atomically (temp file + rename) every interval, so a
// reader never sees a part of it, and removed when the run ends; the run's spend is then added to
// its team's summary file, spendcap_team_<team>.prom, under a lock file (flock), so that runs of
// one team ending together lose no update. A figure not measured (GPU utilisation, energy) is left
// out, never written as 0. The team's budget gauges (its budget, what is left and what its runs
// have spent in the period, running runs included) are refreshed from the ledger's answer to each
// heartbeat, and once more when the run ends, so a dashboard's team spend moves during long runs.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "spendcap/base/money.hpp"
#include "spendcap/supervise/run_part.hpp"
#include "spendcap/supervise/run_terms.hpp"

namespace boost::asio {
class io_context;
}

namespace spendcap {

class Meter;
struct GpuReport;

// One of the team's budgets as the ledger holds it (BudgetView), for the team summary's gauges.
struct TeamBudget {
  std::string period;  // "month", "week", "day", "total"
  Money amount, remaining;
  // What the team's runs have spent in the period: finished runs' spend and running runs' last
  // reported spend. None: not known (no gauge written).
  std::optional<Money> spent;
};

// Where the files go. Errors throw (spendcap::Error); the part says the first one once.
class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  virtual void write_run(const std::string& name, const std::string& text) = 0;
  virtual void remove_run(const std::string& name) = 0;
  // The team summary, updated under its lock file; a squatter's file is replaced, not read.
  virtual void add_to_team(const std::string& team, const std::string& currency, Money spend,
                           const std::vector<TeamBudget>& budgets) = 0;
  // The team summary's budget gauges replaced by `budgets` (a heartbeat's figures), its counters
  // (runs finished, spend totals) kept as they are; under the same lock.
  virtual void refresh_team(const std::string& team, const std::string& currency,
                            const std::vector<TeamBudget>& budgets) = 0;
};

// The directory written with this process's credentials. `runner_group`: the shared runner's
// directory (files 0660, a file of the runner's group trusted whoever's run wrote it).
std::unique_ptr<MetricsSink> direct_metrics_sink(std::string dir, bool runner_group);

struct MetricsPlan {
  std::string dir;  // "": no metrics files
  std::string team, experiment;
  std::shared_ptr<MetricsSink> sink;  // none: direct_metrics_sink(dir, false)
};

// One snapshot of a run, as its file says it.
struct RunMetrics {
  std::string run_id, team, experiment, currency = "USD";
  Money spend, ceiling, rate_per_hour;
  std::optional<Money> budget;
  std::optional<double> gpu_utilisation;  // 0..1
  std::optional<double> energy_joules;    // x PUE
};

// The unit part of a metric name for a currency: "USD" -> "usd". A metric refers to one unit, so
// each currency has its own names (spendcap_run_spend_usd, spendcap_run_spend_eur).
std::string currency_unit(const std::string& currency);

// A label value escaped as the exposition format asks: backslash, double quote and line feed.
std::string prometheus_label_value(const std::string& text);
// The run's file, in the text exposition format.
std::string run_metrics_text(const RunMetrics& metrics);
// The team's summary after one more run that spent `spend` in `currency`: `before` is the file as
// it was ("" for none); the runs finished and each currency's spend total it holds are read back,
// and this run's spend is added to its own currency's counter only. `budgets`: the team's budget,
// remaining-budget and spent gauges (in `currency`, the policy's), left out when empty.
std::string team_summary_text(const std::string& before, const std::string& team,
                              const std::string& currency, Money spend,
                              const std::vector<TeamBudget>& budgets = {});
// The team's summary with its gauges from `budgets` (a heartbeat's): the counters of `before` as
// they are (a currency's spend counter at 0 when it had none), no run counted.
std::string team_gauges_text(const std::string& before, const std::string& team,
                             const std::string& currency, const std::vector<TeamBudget>& budgets);
// The spend totals per currency a team summary holds.
std::map<std::string, Money> team_spend_totals(const std::string& text);

// Whether a file found in the metrics directory may be read back and replaced (a squatter's
// pre-created file may not): a regular file with one link, writable by nobody outside its
// owner and group, and owned by spendcap's effective uid, or (on the setgid install, where each
// user's run writes the team's file) of spendcap's group, which no user holds. "" when trusted,
// else why not.
std::string untrusted_metrics_file(const struct stat& status, uid_t euid, gid_t runner_gid,
                                   bool setgid_install);

// Refuses (Error, 125) a metrics directory that everyone may write (mode o+w) under a locked
// policy: any user could plant or replace the team files there.
void check_shared_metrics_dir(const std::string& dir, bool locked);
// "spendcap_<run id>.prom", "spendcap_team_<team>.prom": bytes outside [A-Za-z0-9_.-] as %XX.
std::string run_metrics_file(const std::string& run_id);
std::string team_metrics_file(const std::string& team);

// The metrics part: a RunPart that the supervisor also tells of each grant.
class MetricsRunPart : public RunPart {
 public:
  // The team's budgets as the ledger answered a heartbeat (or the admission): its gauges are
  // rewritten with them at once. Empty (the team has no budget): nothing is written.
  virtual void on_team_usage(const std::vector<TeamBudget>& budgets) = 0;
};

// The part. `ceiling` gives the run's current ceiling; `gpu` is the GPU sampler's report (its
// summary kept current while the run goes on), none where GPUs are not measured; `budgets` the
// team's budgets from the ledger when the run ends (none when it gives none), `spent` without
// this run's spend (it is added).
std::unique_ptr<MetricsRunPart> make_metrics_part(
    boost::asio::io_context& io, const Meter& meter, const RunTerms& terms, const MetricsPlan& plan,
    std::function<Money()> ceiling, const std::optional<GpuReport>& gpu,
    std::function<std::vector<TeamBudget>()> budgets = {});

}  // namespace spendcap
