// The machine on paper, for driving a whole run (run/run_host.hpp): run_steps over a FakeRunHost
// and a real SQLite ledger goes from the flags to the final row, the status file and the summary
// without forking anything. The guard is a FakeGuardLink on the host's FakeClock, played by
// `script` (by default: the command launches and exits 0, leaving nothing behind); the tree is a
// FakeProcessTree; the terminal is never the job's; the crash-loop back-off is recorded on the
// clock, not slept; the notifier is null (nothing delivered: the targets asked for are recorded).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fakes/fake_clock.hpp"
#include "fakes/fake_guard_link.hpp"
#include "fakes/fake_process_tree.hpp"
#include "fakes/forwarding_ledger.hpp"
#include "spendcap/process/output_relay.hpp"
#include "spendcap/run/ledger_group.hpp"
#include "spendcap/run/run_host.hpp"

namespace spendcap::testing {

class FakeRunHost final : public RunHost {
 public:
  // `env` is the job's environment; PATH, TMPDIR and SPENDCAP_NVML_LIBRARY=none are added when
  // missing (the command is found on the real PATH; no NVML is loaded).
  explicit FakeRunHost(Environment env = {}) : env_(std::move(env)) {
    env_.try_emplace("PATH", "/usr/bin:/bin");
    env_.try_emplace("TMPDIR", "/tmp");
    env_.try_emplace("SPENDCAP_NVML_LIBRARY", "none");
    tree.add();
  }

  TimePoint now() const override { return clock.now(); }
  double unix_seconds() const override { return clock.unix_seconds(); }
  int wait_unless_stopped(Nanos duration) override {
    clock.wait(duration);
    return 0;
  }
  Environment environment() const override { return env_; }
  const RunnerRun* runner() const override { return nullptr; }

  // The real ledger at `url` (on `ledger_clock` when set), behind a ForwardingLedger whose final
  // row fails while `ledger_fault` says why (the row is then spooled, and replayed by the next
  // open).
  std::shared_ptr<Ledger> open_ledger(const std::string& url, const LedgerOptions& asked) override {
    LedgerOptions options = asked;
    if (ledger_clock) options.wall_clock = ledger_clock;
    auto ledger = std::make_shared<ForwardingLedger>(open_ledger_as_installed(url, options),
                                                     [this] { return ledger_fault; });
    opened = ledger;
    return ledger;
  }

  std::string make_cgroup(const std::string& name, bool wanted) override {
    cgroup_asked = name;
    cgroup_wanted = wanted;
    return cgroup_dir;
  }
  void remove_cgroup() override { ++cgroups_removed; }
  void become_subreaper() override { subreaper = true; }

  // No relay: the fake tree writes nothing to spendcap's stderr.
  std::unique_ptr<OutputRelay> start_output_relay() override { return nullptr; }
  StartedGuard start_guard(const LaunchSpec& spec, const GuardOptions& options) override {
    launched = spec;
    guard_options = options;
    auto link = std::make_unique<FakeGuardLink>(&clock);
    link->on_listen = [this](FakeGuardLink& guard) {
      // Whatever happens, the run ends: past this bound the test fails and the tree is empty.
      guard.when([] { return false; }, [] {}, std::chrono::seconds(10));
      script(guard);
    };
    StartedGuard started;
    started.link = std::move(link);
    started.job_write_count = [] { return std::optional<std::uint64_t>(0); };
    return started;
  }
  std::unique_ptr<ProcessTree> make_tree(pid_t root) override {
    tree_roots.push_back(root);
    return std::make_unique<View>(tree);
  }
  std::unique_ptr<Terminal> terminal() override { return std::make_unique<NoTerminal>(); }
  bool owns_terminal() const override { return false; }
  std::unique_ptr<WebhookNotifier> make_notifier(std::vector<WebhookTarget> targets,
                                                 const RunFacts&, Ledger&, const Environment&,
                                                 const Reporter&) override {
    ++notifiers_asked;
    notifier_targets = targets.size();
    return nullptr;
  }

  // ---- the test's side ----

  // A variable of the launched job's environment (SPENDCAP_PROGRESS...), "" when not set.
  std::string job_env(const std::string& name) const {
    if (!launched) return "";
    for (const std::string& entry : launched->env) {
      if (entry.size() > name.size() && entry.compare(0, name.size(), name) == 0 &&
          entry[name.size()] == '=') {
        return entry.substr(name.size() + 1);
      }
    }
    return "";
  }

  FakeClock clock;
  FakeProcessTree tree;  // the job's tree as the supervisor sees it: one member at first
  // The guard's part: by default the command launches and exits 0, leaving nothing behind.
  std::function<void(FakeGuardLink&)> script = [](FakeGuardLink& guard) {
    guard.launch();
    guard.exit(0, true);
  };
  std::string cgroup_dir;                    // what make_cgroup returns: "" is none
  std::string ledger_fault;                  // while not "", the ledger's final row fails with it
  std::shared_ptr<ForwardingLedger> opened;  // the ledger the run opened
  std::function<double()> ledger_clock;      // the ledger's clock (unix seconds): the real one

  // What the run asked of the host.
  std::optional<LaunchSpec> launched;
  GuardOptions guard_options;
  std::string cgroup_asked;
  bool cgroup_wanted = false;
  int cgroups_removed = 0;
  bool subreaper = false;
  std::vector<pid_t> tree_roots;
  int notifiers_asked = 0;
  std::size_t notifier_targets = 0;

 private:
  class View final : public ProcessTree {
   public:
    explicit View(FakeProcessTree& tree) : tree_(tree) {}
    std::vector<ProcStat> members() override { return tree_.members(); }
    int signal_catchers(int signal) override { return tree_.signal_catchers(signal); }
    int signal_all(int signal) override { return tree_.signal_all(signal); }
    int kill_all() override { return tree_.kill_all(); }

   private:
    FakeProcessTree& tree_;
  };
  class NoTerminal final : public Terminal {
   public:
    pid_t job_group() override { return -1; }
    bool spendcap_in_foreground() override { return true; }
    void give_to(pid_t) override {}
    void stop_self() override {}
    void start_waker(TimePoint) override {}
    bool collect_waker() override { return false; }
    bool reaped(pid_t, int) override { return false; }
  };

  Environment env_;
};

}  // namespace spendcap::testing
