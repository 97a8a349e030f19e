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
#include <functional>
#include <map>
#include <sstream>

#include "spendcap/base/error.hpp"
#include "spendcap/base/files.hpp"
#include "spendcap/spend/meter.hpp"
#include "spendcap/supervise/gpu_sampler.hpp"
#include "spendcap/supervise/run_part.hpp"

namespace asio = boost::asio;

namespace spendcap {

namespace {

constexpr mode_t kMetricsFileMode = 0644;  // node_exporter may run as another user
// The shared runner's directory (root:spendcap 2770): whichever user's run ends next updates the
// team's files through the group; node_exporter reads through the directory's default ACL.
constexpr mode_t kSharedFileMode = 0660;

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
  FileLock(const std::string& path, mode_t mode) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd_ < 0)
      throw Error(path, "cannot open the lock file", "check the directory's permissions");
    // The umask would take the group's write bit: the next user's run must open it too.
    ::fchmod(fd_, mode);
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

// The files themselves, written with this process's credentials.
class DirectSink final : public MetricsSink {
 public:
  DirectSink(std::string dir, bool runner_group)
      : dir_(std::move(dir)),
        runner_group_(runner_group),
        mode_(runner_group ? kSharedFileMode : kMetricsFileMode) {}

  void write_run(const std::string& name, const std::string& text) override {
    write_file_atomically(dir_ + "/" + name, text, mode_, "--metrics-dir " + dir_, false);
  }
  void remove_run(const std::string& name) override { ::unlink((dir_ + "/" + name).c_str()); }

  void add_to_team(const std::string& team, const std::string& currency, Money spend,
                   const std::vector<TeamBudget>& budgets) override {
    update_team(team, [&](const std::string& before) {
      return team_summary_text(before, team, currency, spend, budgets);
    });
  }

  void refresh_team(const std::string& team, const std::string& currency,
                    const std::vector<TeamBudget>& budgets) override {
    update_team(team, [&](const std::string& before) {
      return team_gauges_text(before, team, currency, budgets);
    });
  }

 private:
  // Rewrites the team's summary from what it held (`text(before)`), under its lock file.
  void update_team(const std::string& team,
                   const std::function<std::string(const std::string&)>& text) {
    std::string file = team_metrics_file(team);
    std::string lock_path = dir_ + "/" + file.substr(0, file.size() - 5) + ".lock";
    check_found(lock_path);
    FileLock lock(lock_path, mode_);
    // Read without following a link planted in a shared directory; at most 64 KiB (a few samples
    // per currency). A file spendcap did not write (a squatter's, with forged totals) is not read
    // back: its figures are dropped and the file replaced.
    std::string before;
    std::string path = dir_ + "/" + file;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    std::string untrusted;
    if (fd < 0 && errno == ELOOP) untrusted = "a symbolic link";
    if (fd >= 0) {
      struct stat status {};
      untrusted = ::fstat(fd, &status) != 0
                      ? "cannot stat it"
                      : untrusted_metrics_file(status, ::geteuid(), ::getegid(), runner_group_);
      if (!untrusted.empty()) {
        ::close(fd);
        fd = -1;
      }
    }
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
    write_file_atomically(path, text(before), mode_, "--metrics-dir " + dir_, false);
    if (!untrusted.empty()) {
      throw Error(path, "was not trusted (" + untrusted + "): its totals were not carried over",
                  "it is replaced by spendcap's own; a user may not write in the metrics "
                  "directory");
    }
  }

  // A lock file planted by someone else could be held forever (or be a link): refused.
  void check_found(const std::string& path) {
    struct stat status {};
    if (::lstat(path.c_str(), &status) != 0) return;
    std::string why = untrusted_metrics_file(status, ::geteuid(), ::getegid(), runner_group_);
    if (!why.empty()) {
      if (::unlink(path.c_str()) == 0) return;  // spendcap's directory: the squatter's goes
      throw Error(path, "not trusted: " + why, "remove it; spendcap makes its own");
    }
  }

  std::string dir_;
  bool runner_group_;
  mode_t mode_;
};

class MetricsPart final : public MetricsRunPart {
 public:
  MetricsPart(asio::io_context& io, const Meter& meter, const RunTerms& terms,
              const MetricsPlan& plan, std::function<Money()> ceiling,
              const std::optional<GpuReport>& gpu, std::function<std::vector<TeamBudget>()> budgets)
      : timer_(io),
        meter_(meter),
        plan_(terms),
        metrics_plan_(plan),
        ceiling_(std::move(ceiling)),
        gpu_(gpu),
        budgets_(std::move(budgets)),
        sink_(plan.sink ? plan.sink
                        : std::shared_ptr<MetricsSink>(direct_metrics_sink(plan.dir, false))),
        name_(run_metrics_file(terms.run_id)) {}

  void on_launched(TimePoint) override { update(); }

  void on_team_usage(const std::vector<TeamBudget>& budgets) override {
    if (finished_ || budgets.empty()) return;
    try {
      sink_->refresh_team(metrics_plan_.team, plan_.currency, budgets);
    } catch (const std::exception& error) {
      complain(error.what());
    }
  }

  void on_finish() override {
    timer_.cancel();
    if (finished_) return;
    finished_ = true;
    sink_->remove_run(name_);
    try {
      std::vector<TeamBudget> budgets;
      if (budgets_) budgets = budgets_();
      // Read before this run's final row: the ledger still holds its ceiling and has none of its
      // spend. What is left once it ended, as `budgets` shows AVAILABLE then: its spend counted,
      // its ceiling released (issue 30: the gauge stayed short by the ending run's ceiling).
      Money ceiling = ceiling_();
      for (TeamBudget& budget : budgets) {
        budget.remaining = budget.remaining + ceiling - spend();
        if (budget.spent) budget.spent = *budget.spent + spend();
      }
      sink_->add_to_team(metrics_plan_.team, plan_.currency, spend(), budgets);
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
    m.team = metrics_plan_.team;
    m.experiment = metrics_plan_.experiment;
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
      sink_->write_run(name_, run_metrics_text(m));
    } catch (const std::exception& error) {
      complain(error.what());
    }
    timer_.expires_after(plan_.interval);
    timer_.async_wait([this](auto error) {
      if (!error) update();
    });
  }

  // Once: a metrics file that cannot be written does not stop the run.
  void complain(const std::string& why) {
    if (complained_) return;
    complained_ = true;
    std::fprintf(stderr, "spendcap: metrics file: %s\n", why.c_str());
  }

  asio::steady_timer timer_;
  const Meter& meter_;
  const RunTerms& plan_;
  const MetricsPlan& metrics_plan_;
  std::function<Money()> ceiling_;
  const std::optional<GpuReport>& gpu_;
  std::function<std::vector<TeamBudget>()> budgets_;
  std::shared_ptr<MetricsSink> sink_;
  std::string name_;
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

std::string currency_unit(const std::string& currency) {
  std::string unit;
  for (unsigned char c : currency) {
    if (std::isalnum(c)) unit += static_cast<char>(std::tolower(c));
  }
  return unit.empty() ? "unknown" : unit;
}

std::string run_metrics_text(const RunMetrics& m) {
  std::string labels = "{run_id=\"" + prometheus_label_value(m.run_id) + "\",team=\"" +
                       prometheus_label_value(m.team) + "\",experiment=\"" +
                       prometheus_label_value(m.experiment) + "\",currency=\"" +
                       prometheus_label_value(m.currency) + "\"}";
  // One unit per metric: the currency is in the name (spendcap_run_spend_usd, ..._eur), so a USD
  // dashboard keeps its series when a EUR run appears; the currency label stays for selection.
  std::string unit = currency_unit(m.currency);
  auto name = [&unit](const char* head, const char* tail = "") {
    return std::string(head) + "_" + unit + tail;
  };
  std::string out;
  gauge(out, name("spendcap_run_spend").c_str(), "What the run has spent so far.", labels,
        money_number(m.spend));
  gauge(out, name("spendcap_run_ceiling").c_str(), "The spend at which the run is stopped.", labels,
        money_number(m.ceiling));
  if (m.budget) {
    gauge(out, name("spendcap_run_budget").c_str(), "The run's own budget (--budget).", labels,
          money_number(*m.budget));
  }
  gauge(out, name("spendcap_run_burn_rate", "_per_hour").c_str(), "The run's rate.", labels,
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

namespace {

// The value of `label` in a sample line `name{a="x",label="y"} v`; "" when absent. Values written
// by prometheus_label_value: a backslash escapes the next character.
std::string label_of(const std::string& line, const std::string& label) {
  size_t at = line.find("," + label + "=\"");
  if (at == std::string::npos) at = line.find("{" + label + "=\"");
  if (at == std::string::npos) return "";
  std::string value;
  for (size_t i = at + label.size() + 3; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size()) {
      char next = line[++i];
      value += next == 'n' ? '\n' : next;
    } else if (line[i] == '"') {
      return value;
    } else {
      value += line[i];
    }
  }
  return "";
}

std::optional<double> value_of(const std::string& line) {
  size_t space = line.rfind(' ');
  if (space == std::string::npos) return std::nullopt;
  char* end = nullptr;
  double value = std::strtod(line.c_str() + space + 1, &end);
  if (end == line.c_str() + space + 1 || !std::isfinite(value)) return std::nullopt;
  return value;
}

}  // namespace

std::map<std::string, Money> team_spend_totals(const std::string& text) {
  std::map<std::string, Money> totals;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.starts_with("spendcap_team_spend_")) continue;
    size_t brace = line.find('{');
    if (brace == std::string::npos) continue;
    std::string currency = label_of(line, "currency");
    // The name's unit and the label must agree: a file written before issue 21 could hold a
    // spendcap_team_spend_usd_total{currency="EUR"} that summed two currencies; it is not read.
    if (currency.empty() ||
        line.substr(0, brace) != "spendcap_team_spend_" + currency_unit(currency) + "_total") {
      continue;
    }
    if (auto value = value_of(line)) {
      totals[currency] = Money{static_cast<std::int64_t>(std::llround(*value * 1e6))};
    }
  }
  return totals;
}

namespace {

// The summary: the counters of `before` (plus one finished run's `spend`, when given) and the
// budget gauges of `budgets`.
std::string summary_text(const std::string& before, const std::string& team,
                         const std::string& currency, std::optional<Money> finished_spend,
                         const std::vector<TeamBudget>& budgets) {
  double runs = sample_value(before, "spendcap_team_runs_finished_total").value_or(0);
  std::map<std::string, Money> totals = team_spend_totals(before);
  totals[currency] = Money{totals[currency].micros + finished_spend.value_or(Money{}).micros};
  if (finished_spend) runs += 1;
  std::string t = prometheus_label_value(team);
  std::string out;
  out += "# HELP spendcap_team_runs_finished_total Runs of the team that ended with metrics on.\n";
  out += "# TYPE spendcap_team_runs_finished_total counter\n";
  out += "spendcap_team_runs_finished_total{team=\"" + t + "\"} " + number(runs) + "\n";
  // One counter per currency, never summed across currencies.
  for (const auto& [code, total] : totals) {
    std::string name = "spendcap_team_spend_" + currency_unit(code) + "_total";
    out += "# HELP " + name + " What those runs spent, in " + code + ".\n";
    out += "# TYPE " + name + " counter\n";
    out += name + "{team=\"" + t + "\",currency=\"" + prometheus_label_value(code) + "\"} " +
           money_number(total) + "\n";
  }
  // The team's budgets as the ledger had them at the last heartbeat of one of its runs, or when
  // one ended (amounts in the currency of the policy in force): for alerts on what is left.
  if (!budgets.empty()) {
    std::string unit = currency_unit(currency);
    std::string amount_name = "spendcap_team_budget_" + unit;
    std::string left_name = "spendcap_team_budget_remaining_" + unit;
    std::string spent_name = "spendcap_team_budget_spent_" + unit;
    auto labels = [&](const TeamBudget& b) {
      return "{team=\"" + t + "\",currency=\"" + prometheus_label_value(currency) + "\",period=\"" +
             prometheus_label_value(b.period) + "\"}";
    };
    out += "# HELP " + amount_name + " The team's budget in the ledger, per period.\n";
    out += "# TYPE " + amount_name + " gauge\n";
    for (const TeamBudget& b : budgets) {
      out += amount_name + labels(b) + " " + money_number(b.amount) + "\n";
    }
    out += "# HELP " + left_name +
           " The team's budget left: amount less finished runs' spend and running runs' "
           "ceilings.\n";
    out += "# TYPE " + left_name + " gauge\n";
    for (const TeamBudget& b : budgets) {
      out += left_name + labels(b) + " " + money_number(b.remaining) + "\n";
    }
    bool any_spent = false;
    for (const TeamBudget& b : budgets) any_spent = any_spent || b.spent.has_value();
    if (any_spent) {
      out += "# HELP " + spent_name +
             " What the team's runs have spent in the budget's period, running runs' spend so "
             "far included.\n";
      out += "# TYPE " + spent_name + " gauge\n";
      for (const TeamBudget& b : budgets) {
        if (b.spent) out += spent_name + labels(b) + " " + money_number(*b.spent) + "\n";
      }
    }
  }
  return out;
}

}  // namespace

std::string team_summary_text(const std::string& before, const std::string& team,
                              const std::string& currency, Money spend,
                              const std::vector<TeamBudget>& budgets) {
  return summary_text(before, team, currency, spend, budgets);
}

std::string team_gauges_text(const std::string& before, const std::string& team,
                             const std::string& currency, const std::vector<TeamBudget>& budgets) {
  return summary_text(before, team, currency, std::nullopt, budgets);
}

std::string run_metrics_file(const std::string& run_id) {
  return "spendcap_" + file_name_part(run_id) + ".prom";
}

std::string team_metrics_file(const std::string& team) {
  return "spendcap_team_" + file_name_part(team) + ".prom";
}

std::string untrusted_metrics_file(const struct stat& status, uid_t euid, gid_t runner_gid,
                                   bool setgid_install) {
  if (S_ISLNK(status.st_mode)) return "a symbolic link";
  if (!S_ISREG(status.st_mode)) return "not a regular file";
  if (status.st_nlink != 1) return "more than one link to it";
  if (status.st_mode & S_IWOTH) return "anyone may write it";
  if (status.st_uid == euid) return "";
  if (setgid_install && status.st_gid == runner_gid) return "";
  return "written by uid " + std::to_string(status.st_uid) + ", not by spendcap";
}

void check_shared_metrics_dir(const std::string& dir, bool locked) {
  struct stat status {};
  if (!locked || ::stat(dir.c_str(), &status) != 0) return;
  if (status.st_mode & S_IWOTH) {
    throw Error("--metrics-dir " + dir,
                "everyone may write it, so any user could plant or replace the team files",
                "under a locked policy give a directory only the runner's identity writes "
                "(scripts/install-shared-runner.sh --metrics-dir DIR)");
  }
}

std::unique_ptr<MetricsSink> direct_metrics_sink(std::string dir, bool runner_group) {
  return std::make_unique<DirectSink>(std::move(dir), runner_group);
}

std::unique_ptr<MetricsRunPart> make_metrics_part(
    asio::io_context& io, const Meter& meter, const RunTerms& terms, const MetricsPlan& plan,
    std::function<Money()> ceiling, const std::optional<GpuReport>& gpu,
    std::function<std::vector<TeamBudget>()> budgets) {
  return std::make_unique<MetricsPart>(io, meter, terms, plan, std::move(ceiling), gpu,
                                       std::move(budgets));
}

}  // namespace spendcap
