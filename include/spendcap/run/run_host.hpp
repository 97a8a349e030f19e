// What a run asks of the host it runs on (issue 39, item 2): the clock, the job's environment, the
// run's cgroup, spendcap made a subreaper, the ledger opened, the guard forked (behind a
// GuardLink), the tree and the terminal the supervisor watches, and the webhooks' notifier. The
// steps of a run (run/run.hpp, admission, execution) reach the machine only through it, so unit
// tests drive a whole run, from its flags to its final row, through a fake
// (tests/unit/fakes/fake_run_host.hpp: a FakeClock, a FakeGuardLink on the same clock, a fake tree)
// over a real SQLite ledger, in milliseconds. system_run_host() is today's code: what execute_run
// did inline.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "spendcap/base/duration.hpp"
#include "spendcap/base/environment.hpp"
#include "spendcap/ledger/ledger.hpp"
#include "spendcap/notify/webhook_notifier.hpp"
#include "spendcap/process/launcher.hpp"
#include "spendcap/process/process_tree.hpp"
#include "spendcap/process/tree_guard.hpp"
#include "spendcap/supervise/guard_link.hpp"
#include "spendcap/supervise/job_control.hpp"
#include "spendcap/supervise/reporter.hpp"

namespace spendcap {

struct RunnerRun;   // shared_runner/adoption.hpp
class OutputRelay;  // process/output_relay.hpp

// The guard once forked: the link the supervisor drives it by, and what the run says about it.
struct StartedGuard {
  std::unique_ptr<GuardLink> link;
  bool isolated = false;         // the init of its own PID namespace
  std::string why_not_isolated;  // why a PID namespace was asked for and could not be made
  // What the tree wrote so far, for the reporter (Reporter::set_job_write_count).
  std::function<std::optional<std::uint64_t>()> job_write_count;
};

class RunHost {
 public:
  virtual ~RunHost() = default;

  // The monotonic clock, and the wall clock in Unix seconds (the webhooks' started_at).
  virtual TimePoint now() const = 0;
  virtual double unix_seconds() const = 0;
  // The crash-loop guard's back-off: waits `duration` unless a stop signal comes first; returns
  // that signal, 0 when waited out.
  virtual int wait_unless_stopped(Nanos duration) = 0;

  // The job's environment (under the privileged runner: the front's, not the runner's own), and
  // what the privileged runner set up (null elsewhere).
  virtual Environment environment() const = 0;
  virtual const RunnerRun* runner() const = 0;

  // The run's ledger, opened as installed (run/ledger_group.hpp open_ledger_as_installed). Every
  // write of the run, its final row included, goes through what this returns, so a fake host may
  // hand back a ledger that refuses a step (the final row spooled instead).
  virtual std::shared_ptr<Ledger> open_ledger(const std::string& url,
                                              const LedgerOptions& options) = 0;

  // The run's cgroup: the runner's, else `name` made where the hierarchy is writable and `wanted`;
  // returns its directory, "" for none (the tree is followed by parentage). remove_cgroup()
  // removes one this host made, best effort.
  virtual std::string make_cgroup(const std::string& name, bool wanted) = 0;
  virtual void remove_cgroup() = 0;
  // Orphans of the tree re-parent to spendcap should the guard die.
  virtual void become_subreaper() = 0;
  // Forks the guard (before any thread of spendcap's: the notifier starts after). Throws Error.
  virtual StartedGuard start_guard(const LaunchSpec& spec, const GuardOptions& options) = 0;
  // The output relay (process/output_relay.hpp) when stderr is a pipe, else null; started before
  // the guard, which is handed it.
  virtual std::unique_ptr<OutputRelay> start_output_relay() = 0;
  // The tree under `root` (the guard), in the run's cgroup when there is one.
  virtual std::unique_ptr<ProcessTree> make_tree(pid_t root) = 0;
  // The terminal the job may be given (job control).
  virtual std::unique_ptr<Terminal> terminal() = 0;
  // Whether stdin is a terminal whose foreground group is spendcap's: the job then takes it.
  virtual bool owns_terminal() const = 0;
  // The run's notifier (run/run_notifier.hpp make_run_notifier), or null: nothing to deliver.
  virtual std::unique_ptr<WebhookNotifier> make_notifier(std::vector<WebhookTarget> targets,
                                                         const RunFacts& facts, Ledger& ledger,
                                                         const Environment& env,
                                                         const Reporter& reporter) = 0;
};

// The host itself: the real clock, prctl, the cgroup, the forked guard and its pipes, libcurl.
std::unique_ptr<RunHost> system_run_host();

}  // namespace spendcap
