#include "spendcap/run/run_host.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <optional>

#include "spendcap/base/signals.hpp"
#include "spendcap/notify/payload.hpp"
#include "spendcap/process/cgroup.hpp"
#include "spendcap/process/output_relay.hpp"
#include "spendcap/run/ledger_group.hpp"
#include "spendcap/run/run_notifier.hpp"
#include "spendcap/shared_runner/adoption.hpp"

namespace spendcap {

namespace {

class SystemRunHost final : public RunHost {
 public:
  TimePoint now() const override { return spendcap::now(); }
  double unix_seconds() const override { return unix_now(); }

  int wait_unless_stopped(Nanos duration) override {
    // The stop signals are blocked: the wait ends early on one.
    sigset_t stops;
    sigemptyset(&stops);
    for (int signal : kStopSignals) sigaddset(&stops, signal);
    auto seconds = std::chrono::duration_cast<std::chrono::seconds>(duration);
    timespec wait{static_cast<time_t>(seconds.count()),
                  static_cast<long>((duration - seconds).count())};
    int signal = 0;
    while ((signal = ::sigtimedwait(&stops, nullptr, &wait)) < 0 && errno == EINTR) {
    }
    return signal > 0 ? signal : 0;
  }

  Environment environment() const override {
    const RunnerRun* run = runner();
    return run ? run->environment : current_environment();
  }
  const RunnerRun* runner() const override { return runner_run(); }

  std::shared_ptr<Ledger> open_ledger(const std::string& url,
                                      const LedgerOptions& options) override {
    return open_ledger_as_installed(url, options);
  }

  std::string make_cgroup(const std::string& name, bool wanted) override {
    // The privileged runner's (made as root; the keeper removes it), else the run's own.
    if (const RunnerRun* run = runner()) {
      cgroup_ = run->cgroup;
    } else if (wanted) {
      std::string why_not;
      cgroup_ = Cgroup::create(name, &why_not);
    }
    return cgroup_ ? cgroup_->path() : "";
  }
  void remove_cgroup() override {
    if (cgroup_) cgroup_->remove();
  }
  void become_subreaper() override { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }

  StartedGuard start_guard(const LaunchSpec& spec, const GuardOptions& options) override {
    GuardHandle guard = spendcap::start_guard(spec, cgroup_ ? &*cgroup_ : nullptr, options);
    StartedGuard started;
    started.isolated = guard.isolated;
    started.why_not_isolated = guard.why_not_isolated;
    started.job_write_count = [pid = guard.pid, reaped = guard.reaped_written] {
      return write_count_of_tree(pid, reaped);
    };
    started.link = guard_link(guard);
    return started;
  }
  std::unique_ptr<OutputRelay> start_output_relay() override { return OutputRelay::start(); }
  std::unique_ptr<ProcessTree> make_tree(pid_t root) override {
    return std::make_unique<LiveProcessTree>(root, cgroup_ ? &*cgroup_ : nullptr);
  }
  std::unique_ptr<Terminal> terminal() override { return stdin_terminal(); }
  bool owns_terminal() const override {
    return ::isatty(STDIN_FILENO) && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp();
  }
  std::unique_ptr<WebhookNotifier> make_notifier(std::vector<WebhookTarget> targets,
                                                 const RunFacts& facts, Ledger& ledger,
                                                 const Environment& env,
                                                 const Reporter& reporter) override {
    return make_run_notifier(std::move(targets), facts, ledger, env, reporter);
  }

 private:
  std::optional<Cgroup> cgroup_;
};

}  // namespace

std::unique_ptr<RunHost> system_run_host() {
  return std::make_unique<SystemRunHost>();
}

}  // namespace spendcap
