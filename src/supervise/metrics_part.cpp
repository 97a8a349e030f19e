#include "spendcap/supervise/metrics_part.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <boost/asio/steady_timer.hpp>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "spendcap/base/error.hpp"
#include "spendcap/base/files.hpp"
#include "spendcap/spend/meter.hpp"
#include "spendcap/supervise/gpu_sampler.hpp"
#include "spendcap/supervise/run_part.hpp"
#include "spendcap/supervise/supervisor.hpp"

namespace asio = boost::asio;

namespace spendcap {

namespace {

constexpr mode_t kMetricsFileMode = 0644;  // node_exporter may run as another user

std::string number(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

std::string money_number(Money money) {
  char text[64];
  std::snprintf(text, sizeof text, "%.6f", static_cast<double>(money.micros) / 1e6);
  return text;
}

std::string file_name_part(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '_' || c == '-' || c == '.') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

void gauge(std::string& out, const char* name, const char* help, const std::string& labels,
           const std::string& value) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += " gauge\n";
  out += name;
  out += labels;
  out += ' ';
  out += value;
  out += '\n';
}

// The value of the sample `name{...}` in `text`, if there is one.
std::optional<double> sample_value(const std::string& text, const std::string& name) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.starts_with(name + "{") && !line.starts_with(name + " ")) continue;
    size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    char* end = nullptr;
    double value = std::strtod(line.c_str() + space + 1, &end);
    if (end != line.c_str() + space + 1 && std::isfinite(value)) return value;
  }
  return std::nullopt;
}

// Holds an exclusive flock on a lock file beside the summary; released when destroyed.
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, kMetricsFileMode);
    if (fd_ < 0)
      throw Error(path, "cannot open the lock file", "check the directory's permissions");
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
        ::close(fd_);
        throw Error(path, "cannot lock", "check the directory's filesystem supports flock");
      }
    }
  }
  ~FileLock() { ::close(fd_); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

class MetricsPart final : public RunPart {
 public:
  MetricsPart(asio::io_context& io, const Meter& meter, const SupervisorPlan& plan,
              std::function<Money()> ceiling, const std::optional<GpuReport>& gpu)
      : timer_(io),
        meter_(meter),
        plan_(plan),
        ceiling_(std::move(ceiling)),
        gpu_(gpu),
        path_(plan.metrics.dir + "/" + run_metrics_file(plan.run_id)) {}

  void on_launched(TimePoint) override { update(); }

  void on_finish() override {
    timer_.cancel();
    if (finished_) return;
    finished_ = true;
    ::unlink(path_.c_str());
    try {
      add_to_team_summary();
    } catch (const std::exception& error) {
      complain(error.what());
    }
  }

 private:
  Money spend() const { return meter_.spend_at(meter_.ended_at().value_or(now())); }

  void update() {
    if (finished_) return;
    RunMetrics m;
    m.run_id = plan_.run_id;
    m.team = plan_.metrics.team;
    m.experiment = plan_.metrics.experiment;
    m.currency = plan_.currency;
    m.spend = spend();
    m.ceiling = ceiling_();
    m.rate_per_hour = plan_.rate_per_hour;
    m.budget = plan_.run_budget;
    if (gpu_ && gpu_->not_measured.empty() && !gpu_->summary.devices.empty()) {
      m.gpu_utilisation = gpu_->summary.mean_utilisation();
      if (gpu_->summary.energy_joules) m.energy_joules = *gpu_->summary.energy_joules * gpu_->pue;
    }
    try {
      write_file_atomically(path_, run_metrics_text(m), kMetricsFileMode, "--metrics-dir " + path_,
                            false);
    } catch (const std::exception& error) {
      complain(error.what());
    }
    timer_.expires_after(plan_.interval);
    timer_.async_wait([this](auto error) {
      if (!error) update();
    });
  }

  void add_to_team_summary() {
    const std::string& dir = plan_.metrics.dir;
    std::string file = team_metrics_file(plan_.metrics.team);
    FileLock lock(dir + "/" + file.substr(0, file.size() - 5) + ".lock");
    // Read without following a link planted in a shared directory; at most 64 KiB (it holds two
    // samples).
    std::string before;
    int fd = ::open((dir + "/" + file).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
      char buffer[65536];
      ssize_t n = 0;
      while (before.size() < sizeof buffer &&
             (n = ::read(fd, buffer, sizeof buffer - before.size())) != 0) {
        if (n < 0) {
          if (errno == EINTR) continue;
          break;
        }
        before.append(buffer, static_cast<size_t>(n));
      }
      ::close(fd);
    }
    write_file_atomically(dir + "/" + file,
                          team_summary_text(before, plan_.metrics.team, plan_.currency, spend()),
                          kMetricsFileMode, "--metrics-dir " + dir, false);
  }

  // Once: a metrics file that cannot be written does not stop the run.
  void complain(const std::string& why) {
    if (complained_) return;
    complained_ = true;
    std::fprintf(stderr, "spendcap: metrics file: %s\n", why.c_str());
  }

  asio::steady_timer timer_;
  const Meter& meter_;
  const SupervisorPlan& plan_;
  std::function<Money()> ceiling_;
  const std::optional<GpuReport>& gpu_;
  std::string path_;
  bool finished_ = false, complained_ = false;
};

}  // namespace

std::string prometheus_label_value(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string run_metrics_text(const RunMetrics& m) {
  std::string labels = "{run_id=\"" + prometheus_label_value(m.run_id) + "\",team=\"" +
                       prometheus_label_value(m.team) + "\",experiment=\"" +
                       prometheus_label_value(m.experiment) + "\",currency=\"" +
                       prometheus_label_value(m.currency) + "\"}";
  std::string out;
  gauge(out, "spendcap_run_spend_usd", "What the run has spent so far.", labels,
        money_number(m.spend));
  gauge(out, "spendcap_run_ceiling_usd", "The spend at which the run is stopped.", labels,
        money_number(m.ceiling));
  if (m.budget) {
    gauge(out, "spendcap_run_budget_usd", "The run's own budget (--budget).", labels,
          money_number(*m.budget));
  }
  gauge(out, "spendcap_run_burn_rate_usd_per_hour", "The run's rate.", labels,
        money_number(m.rate_per_hour));
  if (m.gpu_utilisation) {
    gauge(out, "spendcap_run_gpu_utilisation_ratio",
          "Busy over allocated GPU time since the run started.", labels,
          number(*m.gpu_utilisation));
  }
  if (m.energy_joules) {
    gauge(out, "spendcap_run_gpu_energy_joules", "Energy of the run's GPUs, times the PUE.", labels,
          number(*m.energy_joules));
  }
  return out;
}

std::string team_summary_text(const std::string& before, const std::string& team,
                              const std::string& currency, Money spend) {
  double runs = sample_value(before, "spendcap_team_runs_finished_total").value_or(0);
  double spent = sample_value(before, "spendcap_team_spend_usd_total").value_or(0);
  Money total{static_cast<std::int64_t>(std::llround(spent * 1e6)) + spend.micros};
  std::string t = prometheus_label_value(team);
  std::string out;
  out += "# HELP spendcap_team_runs_finished_total Runs of the team that ended with metrics on.\n";
  out += "# TYPE spendcap_team_runs_finished_total counter\n";
  out += "spendcap_team_runs_finished_total{team=\"" + t + "\"} " + number(runs + 1) + "\n";
  out += "# HELP spendcap_team_spend_usd_total What those runs spent.\n";
  out += "# TYPE spendcap_team_spend_usd_total counter\n";
  out += "spendcap_team_spend_usd_total{team=\"" + t + "\",currency=\"" +
         prometheus_label_value(currency) + "\"} " + money_number(total) + "\n";
  return out;
}

std::string run_metrics_file(const std::string& run_id) {
  return "spendcap_" + file_name_part(run_id) + ".prom";
}

std::string team_metrics_file(const std::string& team) {
  return "spendcap_team_" + file_name_part(team) + ".prom";
}

std::unique_ptr<RunPart> make_metrics_part(asio::io_context& io, const Meter& meter,
                                           const SupervisorPlan& plan,
                                           std::function<Money()> ceiling,
                                           const std::optional<GpuReport>& gpu) {
  return std::make_unique<MetricsPart>(io, meter, plan, std::move(ceiling), gpu);
}

}  // namespace spendcap
