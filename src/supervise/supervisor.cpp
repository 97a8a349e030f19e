#include "spendcap/supervise/supervisor.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>

#include "spendcap/base/error.hpp"
#include "spendcap/spend/meter.hpp"
#include "spendcap/supervise/checkpoint_watch.hpp"
#include "spendcap/supervise/signal_forward.hpp"
#include "spendcap/supervise/start_line.hpp"
#include "spendcap/supervise/threshold_part.hpp"
#include "spendcap/supervise/title_part.hpp"

namespace asio = boost::asio;

namespace spendcap {

namespace {

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by " + signal_name(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// The kill path's timer on the event loop. A wait that already completed when it was re-armed still
// runs its handler; the generation keeps it from reaching the kill path.
class SteadyKillPathTimer final : public KillPathTimer {
 public:
  SteadyKillPathTimer(asio::io_context& io, const GuardLink& clock, std::function<void()> fire)
      : timer_(io), clock_(clock), fire_(std::move(fire)) {}
  TimePoint now() const override { return clock_.now(); }
  void arm(TimePoint at) override {
    unsigned armed = ++generation_;
    timer_.expires_at(at);
    timer_.async_wait([this, armed](auto error) {
      if (!error && armed == generation_) fire_();
    });
  }
  void cancel() override {
    ++generation_;
    timer_.cancel();
  }

 private:
  asio::steady_timer timer_;
  const GuardLink& clock_;
  std::function<void()> fire_;
  unsigned generation_ = 0;
};

// After this many SIGKILL rounds (1 s at kKillRepeat) with the tree not yet empty, an isolated
// guard is SIGKILLed itself.
constexpr int kKillRoundsBeforeGuard = 50;

}  // namespace

class Supervisor::Impl {
 public:
  Impl(SupervisorPlan plan, std::unique_ptr<GuardLink> guard, std::unique_ptr<Terminal> terminal,
       Reporter& reporter, std::shared_ptr<Ledger> ledger)
      : plan_(std::move(plan)),
        reporter_(reporter),
        guard_(std::move(guard)),
        terminal_(std::move(terminal)),
        tree_(plan_.make_tree(guard_->pid())),
        signals_(io_),
        children_(io_, SIGCHLD),
        trip_timer_(io_),
        watchdog_timer_(io_),
        kill_timer_(io_, *guard_,
                    [this] {
                      kill_path_.on_timer();
                      last_resort();
                    }),
        kill_path_(*tree_, kill_timer_, plan_.checkpoint_signal,
                   [this](const std::string& line) { reporter_.line(line); }),
        meter_(plan_.rate_per_hour - plan_.storage.rate_per_hour),
        reserve_(shutdown_reserve(plan_.rate_per_hour, plan_.on_trip)) {
    for (int signal : kStopSignals) signals_.add(signal);
    kill_path_.set_exit_window(plan_.exit_window);
    add_parts(std::move(ledger));
    outcome_.run_id = plan_.run_id;
    outcome_.currency = plan_.currency;
    outcome_.rate_per_hour = plan_.rate_per_hour;
    outcome_.budget = plan_.run_budget;
  }

  RunOutcome run() {
    guard_->listen(
        io_, [this](const GuardEvent& event) { on_guard_event(event); }, [this] { guard_lost(); });
    wait_for_signals();
    job_control_->start();
    reap_children();
    // Stop signals that came while the run was being set up are delivered now.
    block_stop_signals(false);
    // Every thread of the run is running (reporter, webhooks, ledger worker): the job may start.
    guard_->order(GuardOrderKind::launch, 0);
    io_.run();
    return outcome_;
  }

  std::string record_final(const RunFinal& final, Nanos timeout,
                           const std::vector<std::int64_t>& outbox_delivered) {
    return heartbeat_->record_final(final, timeout, outbox_delivered);
  }

 private:
  // The parts, in the order they hear of the launch, the stop and the end.
  void add_parts(std::shared_ptr<Ledger> ledger) {
    // Built first (its grant is what the others read), told last: the heartbeat starts after the
    // other parts heard of the launch.
    auto heartbeat = std::make_unique<HeartbeatPart>(
        io_, reporter_, meter_, plan_, plan_, reserve_, std::move(ledger), notifier_,
        HeartbeatPart::Hooks{
            .warning = [this] { return running() && !trip_; },
            .tripped = [this] { return trip_.has_value(); },
            .ceiling_moved = [this] { tell_guard_deadline(); },
            .granted = [this](const Grant& grant) { on_grant(grant); },
            .progress = [this] { return live_progress_; },
        });
    heartbeat_ = heartbeat.get();
    parts_.push_back(make_threshold_part(io_, reporter_, meter_, plan_, notifier_));
    parts_.push_back(make_title_part(io_, reporter_, meter_, plan_));
    if (plan_.preemption_part) {
      parts_.push_back(plan_.preemption_part(io_, reporter_, [this](const std::string& reason) {
        if (running() && meter_.launched_at()) {
          trip(Trip{TripKind::preemption, reason, 0}, now());
        }
      }));
    }
    parts_.push_back(std::make_unique<SignalForwarder>(
        io_, reporter_, [this]() -> ProcessTree& { return *tree_; }, plan_.forward_signals));
    parts_.push_back(make_gpu_sampler(
        io_, reporter_, meter_, plan_.gpu, plan_.interval, [this] { return tree_->members(); },
        [this](const Trip& stop) {
          if (!trip_ && running()) trip(stop, now());
        },
        outcome_.gpu));
    if (!plan_.metrics.dir.empty()) {
      auto metrics = make_metrics_part(
          io_, meter_, plan_, plan_.metrics, [this] { return heartbeat_->ceiling(); }, outcome_.gpu,
          [this] { return heartbeat_->team_budgets(plan_.metrics.team); });
      metrics_ = metrics.get();
      parts_.push_back(std::move(metrics));
    }
    if (!plan_.storage.dir.empty()) {
      meter_.charge_storage(plan_.storage.per_gb_month, plan_.storage.max_gb);
      parts_.push_back(make_storage_part(io_, reporter_, meter_, plan_.storage));
    }
    auto runaway = [this](const Trip& runaway) {
      if (running()) trip(runaway, now());
    };
    parts_.push_back(make_guard_part(io_, reporter_, meter_, plan_, plan_.guards, runaway,
                                     outcome_.progress, live_progress_));
    if (plan_.guards.respawn) {
      parts_.push_back(
          make_respawn_part(io_, reporter_, plan_, *plan_.guards.respawn, guard_->pid(), runaway));
    }
    auto job_control =
        std::make_unique<JobControl>(io_, reporter_, meter_, plan_, plan_, plan_.sync, *terminal_,
                                     JobControl::Hooks{
                                         .running = [this] { return running(); },
                                         .tree = [this]() -> ProcessTree& { return *tree_; },
                                         .budget_trip = [this] { return budget_trip(); },
                                         .heartbeat_now = [this] { heartbeat_->heartbeat_now(); },
                                     });
    job_control_ = job_control.get();
    parts_.push_back(std::move(job_control));
    auto checkpoint =
        std::make_unique<CheckpointWatch>(io_, plan_.checkpoint_done_path, kill_path_);
    checkpoint_ = checkpoint.get();
    parts_.push_back(std::move(checkpoint));
    parts_.push_back(std::move(heartbeat));
  }

  TimePoint now() const { return guard_->now(); }
  bool finished() const { return kill_path_.phase() == KillPhase::done; }
  bool running() const { return kill_path_.phase() == KillPhase::running; }

  // ---- the guard's reports ----

  void on_guard_event(const GuardEvent& event) {
    TimePoint at = from_ns(event.monotonic_ns);
    switch (event.kind) {
      case GuardEventKind::launched:
        on_launched(at);
        break;
      case GuardEventKind::launch_failed:
        reporter_.error(
            (event.pid > 0 ? "cannot execute the command: " : "cannot start the command: ") +
            errno_text(event.value));
        if (event.pid <= 0) launch_failed_ = true;  // fork failed: no process, no exit status
        break;
      case GuardEventKind::main_exited:
        on_main_exited(event.value, at, event.tree_empty != 0);
        break;
      case GuardEventKind::tree_empty:
        on_tree_empty(at);
        break;
      case GuardEventKind::main_stopped:
        job_control_->on_job_stopped();
        break;
      case GuardEventKind::orphan_exited:
        for (auto& part : parts_) part->on_orphan_exited(event.pid, event.value);
        break;
    }
  }

  void on_launched(TimePoint at) {
    meter_.launched(at);
    reporter_.line(start_line(
        plan_, StartFacts{plan_.label, plan_.isolation, plan_.ledger, plan_.on_trip, reserve_, at,
                          heartbeat_->ceiling(), heartbeat_->allowed(), heartbeat_->binding(),
                          heartbeat_->fair_share(), plan_.grant.scopes}));
    arm_trip_timer();
    for (auto& part : parts_) part->on_launched(at);
    // The team's gauges from the admission's figures; each heartbeat's answer refreshes them.
    if (metrics_)
      metrics_->on_team_usage(HeartbeatPart::team_usage(plan_.grant, plan_.metrics.team));
    tell_guard();
    tell_guard_deadline();
    if (pending_signal_) on_signal(pending_signal_);
  }

  void on_main_exited(int status, TimePoint at, bool tree_empty) {
    if (WIFEXITED(status)) outcome_.command_exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) outcome_.command_signal = WTERMSIG(status);
    main_status_ = status;
    main_exited_ = true;
    if (tree_empty) return;  // tree_empty follows at once
    if (running()) stopping();
    kill_path_.main_exited(at, describe_wait_status(status), plan_.on_trip.kill_after, empty_by());
  }

  void on_tree_empty(TimePoint at) {
    meter_.tree_empty(at);
    finish();
  }

  // The guard died before the tree was empty (someone SIGKILLed it). The command's PDEATHSIG
  // killed the main process; every orphan now re-parents to spendcap (a subreaper): kill them
  // and reap them here.
  void guard_lost() {
    if (finished() || guard_lost_) return;
    guard_lost_ = true;
    reporter_.error("the guard process died; killing what is left of the tree");
    tree_ = plan_.make_tree(::getpid());
    kill_path_.use_tree(*tree_);
    if (!meter_.launched_at()) meter_.launched(now());
    kill_path_.kill_now();
    reap_now();
  }

  // ---- signals to spendcap, and its children ----

  void wait_for_signals() {
    signals_.async_wait([this](auto error, int signal) {
      if (error || finished()) return;
      on_signal(signal);
      wait_for_signals();
    });
  }

  void on_signal(int signal) {
    if (!meter_.launched_at()) {
      pending_signal_ = signal;  // the launch report is on its way
      return;
    }
    if (!trip_) {
      // SIGHUP: the terminal hung up (tmux kill-session, a closed ssh session, the front gone).
      // The user ended the run, as with Ctrl-C: the checkpoint signal and the grace, recorded as
      // "hangup", never as the command's failure.
      bool hangup = signal == SIGHUP;
      reporter_.line("got " + signal_name(signal) +
                     (hangup ? " (the terminal hung up): stopping the job" : ": stopping the job"));
      trip(Trip{TripKind::signal, hangup ? "hangup" : "signal:" + signal_name(signal), signal},
           now());
      return;
    }
    // A second signal hurries the kill path along, one step per signal.
    reporter_.line("got " + signal_name(signal) + " again: skipping ahead");
    kill_path_.skip_ahead();
  }

  void reap_children() {
    children_.async_wait([this](auto error, int) {
      if (error || finished()) return;
      reap_now();
      reap_children();
    });
  }

  // Until the guard is reaped its I/O counts are its own (reaped, they merge into spendcap's):
  // once it has exited, the reporter takes the job's write count one last time (reporter.hpp).
  void note_guard_exit(bool wait) {
    if (guard_reaped_ || guard_lost_ || guard_->pid() <= 0) return;
    if (guard_->exited(wait)) reporter_.freeze_job_write_count();
  }

  // Reaps spendcap's own children: the guard at the end, orphans when spendcap is PID 1 (as tini
  // does) or when the guard died, and the waker.
  void reap_now() {
    note_guard_exit(false);
    while (true) {
      int status = 0;
      pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid > 0) {
        if (pid == guard_->pid()) guard_reaped_ = true;
        job_control_->reaped(pid, status);
        continue;
      }
      if (pid < 0 && errno == EINTR) continue;
      if (pid < 0 && errno == ECHILD && guard_lost_ && !finished()) on_tree_empty(now());
      return;
    }
  }

  // ---- the trip ----

  // When spend + reserve reaches what the grant allows (none: never).
  std::optional<TimePoint> budget_trip() const {
    return budget_trip_time(*meter_.launched_at(), plan_.rate_per_hour, heartbeat_->allowed(),
                            reserve_);
  }

  void arm_trip_timer() {
    if (trip_ || !running() || !meter_.launched_at()) return;
    auto at = budget_trip();
    if (!at) {
      trip_timer_.cancel();
      return;
    }
    TimePoint planned = *at;
    trip_timer_.expires_at(planned);
    trip_timer_.async_wait([this, planned](auto error) {
      if (!error) on_trip_timer(planned);
    });
  }

  void on_trip_timer(TimePoint planned) {
    if (trip_ || !running()) return;
    // A limiting scope means the budget is spent. Without one the grants were full, and only a
    // ledger that did not answer in time lets a run reach its ceiling.
    const std::optional<Scope>& binding = heartbeat_->binding();
    trip(binding ? Trip{TripKind::budget, budget_reason(*binding), 0}
                 : Trip{TripKind::ledger_unreachable, "ledger-unreachable", 0},
         planned);
  }

  // A grant was applied and its warnings said: a stop order on one of the run's scopes trips it,
  // else the trip timer follows the new grant.
  void on_grant(const Grant& grant) {
    if (metrics_) metrics_->on_team_usage(HeartbeatPart::team_usage(grant, plan_.metrics.team));
    if (grant.stop && !trip_ && meter_.launched_at()) {
      const StopOrder& order = *grant.stop;
      std::string line = "stop order on " + to_string(order.scope) + " by " + order.placed_by +
                         (order.reason.empty() ? "" : " (" + order.reason + ")");
      reporter_.line(line);
      outcome_.first_trip = heartbeat_->first_trip_of(order);
      notifier_.notify(RunEvent{"stop-order", "stop-order", to_string(order.scope), line,
                                meter_.spend_at(now())});
      trip(Trip{TripKind::stop_order, "stop-order", 0}, now());
      return;
    }
    arm_trip_timer();
  }

  // Every trip comes through here: the budget timer (a budget, or the ledger unreachable), a stop
  // order, a runaway guard, a preemption notice, a signal to spendcap. `at` is the trip's planned
  // moment. In warn mode a budget trip is reported and the run goes on; anything else stops it in
  // either mode. The first trip wins: a second cause racing it changes nothing.
  void trip(const Trip& trip, TimePoint at) {
    if (trip_) return;
    bool budget = trip.kind == TripKind::budget || trip.kind == TripKind::ledger_unreachable;
    if (budget && plan_.mode == Mode::warn) {
      would_stop(trip.reason);
      return;
    }
    const ShutdownTimes& times = trip.kind == TripKind::signal       ? plan_.on_signal
                                 : trip.kind == TripKind::preemption ? plan_.on_preemption
                                                                     : plan_.on_trip;
    trip_ = trip;
    trip_at_ = at;
    stopping();
    std::string first_trip = heartbeat_->tell_other_nodes(trip);
    if (!first_trip.empty()) outcome_.first_trip = first_trip;
    outcome_.tripped_after_seconds = to_seconds(at - *meter_.launched_at());
    bool started = kill_path_.trip(at, times, empty_by(), trip_headline(trip, at));
    // A trip while the job is paused still stops it: continued, it can take its checkpoint.
    job_control_->on_trip();
    if (!started) return;
    outcome_.checkpoint_signalled = kill_path_.checkpoint_signalled();
    outcome_.grace_skipped = kill_path_.grace_skipped();
    outcome_.checkpoint_signal =
        kill_path_.checkpoint_signal() ? signal_name(kill_path_.checkpoint_signal()) : "none";
    // Watching starts once the grace is armed: a checkpoint already written ends it at once. The
    // kill path's timer acts by phase, so this order cannot replace the SIGKILL step with the grace
    // step (it could when each arming carried its own step).
    if (kill_path_.phase() == KillPhase::grace) checkpoint_->watch();
  }

  // "budget:run tripped after 7s: $0.07 spent + $0.03 reserve reaches the ceiling $0.10".
  std::string trip_headline(const Trip& trip, TimePoint at) const {
    Money spend = meter_.spend_at(at);
    std::string line = trip.reason + " tripped after " +
                       format_duration(at - *meter_.launched_at()) + ": " +
                       format_money(spend, plan_.currency) + " spent";
    if (trip.kind == TripKind::budget || trip.kind == TripKind::ledger_unreachable) {
      line += " + " + format_money(reserve_, plan_.currency) + " reserve reaches the ceiling " +
              format_money(heartbeat_->ceiling(), plan_.currency);
    }
    return line;
  }

  // The run only shuts down from now on: nothing more trips or warns.
  void stopping() {
    trip_timer_.cancel();
    for (auto& part : parts_) part->on_stopping();
  }

  void would_stop(const std::string& reason) {
    if (would_stop_reported_) return;
    would_stop_reported_ = true;
    reporter_.line("warn mode: " + reason + " would stop the run now (" +
                   format_money(meter_.spend_at(now()), plan_.currency) + " spent); it goes on");
    heartbeat_->record_would_stop(reason);
  }

  // The moment spend would reach the ceiling: no process may outlive it.
  std::optional<TimePoint> empty_by() const {
    return ceiling_reached_time(*meter_.launched_at(), plan_.rate_per_hour, heartbeat_->ceiling());
  }

  // ---- the guard's watchdog: ticks while the guard reads them, and the deadline at each grant
  // ----

  // The guard counts the supervisor as stopped only near the deadline (watchdog.hpp: from
  // deadline - orphan_kill_after, ticks older than stale_after): ticks before that window wake
  // both processes every interval for nothing, so the first is sent one interval before it opens.
  // No deadline (warn mode): the guard never needs one. Without plan_.guard_ticks_lead: every
  // interval.
  void tell_guard() {
    if (finished()) return;
    if (plan_.guard_ticks_lead && meter_.launched_at()) {
      auto deadline = plan_.mode == Mode::enforce ? empty_by() : std::nullopt;
      if (!deadline) {
        watchdog_timer_.cancel();
        return;
      }
      TimePoint from = *deadline - *plan_.guard_ticks_lead - plan_.interval;
      if (now() < from) {
        watchdog_timer_.expires_at(from);
        watchdog_timer_.async_wait([this](auto error) {
          if (!error) tell_guard();
        });
        return;
      }
    }
    guard_->order(GuardOrderKind::tick, 0);
    watchdog_timer_.expires_after(plan_.interval);
    watchdog_timer_.async_wait([this](auto error) {
      if (!error) tell_guard();
    });
  }

  void tell_guard_deadline() {
    if (!meter_.launched_at()) return;
    // In warn mode nothing is stopped, by the supervisor or by the guard.
    auto deadline = plan_.mode == Mode::enforce ? empty_by() : std::nullopt;
    guard_->order(GuardOrderKind::deadline, deadline ? to_ns(*deadline) : 0);
    // The window of ticks moved with the deadline.
    if (plan_.guard_ticks_lead && !trip_) tell_guard();
  }

  // The last resort, after 1 s of SIGKILL rounds with the tree still there: a guard that is the
  // init of its PID namespace takes every process of the namespace with it, whatever the walk
  // misses.
  void last_resort() {
    if (kill_path_.phase() != KillPhase::killing || !guard_->isolated() || guard_lost_ ||
        guard_reaped_) {
      return;
    }
    if (++kill_rounds_ == kKillRoundsBeforeGuard) guard_->kill();
  }

  // ---- the end ----

  void finish() {
    if (finished()) return;
    kill_path_.done();
    // A stop signal from now on waits until the final row is written (run_command re-raises it).
    block_stop_signals(true);
    trip_timer_.cancel();
    watchdog_timer_.cancel();
    for (auto& part : parts_) part->on_finish();
    signals_.cancel();
    // The guard exits right after reporting the tree empty.
    if (!guard_reaped_ && !guard_lost_) {
      note_guard_exit(true);
      guard_->reap();
    }
    children_.cancel();
    job_control_->give_back();

    TimePoint end = *meter_.ended_at();
    outcome_.spend = meter_.spend_at(end);
    outcome_.storage_spend = meter_.storage_spend_at(end);
    outcome_.storage_peak_gb = meter_.storage_peak_gb();
    // Measured billing: the GPU part by busy GPU time (never above the allocated spend, which the
    // ceilings and the trip were held to).
    if (outcome_.gpu && outcome_.gpu->measured_spend) {
      outcome_.spend = std::min(outcome_.spend, *outcome_.gpu->measured_spend);
      outcome_.billing = "measured";
    }
    outcome_.ceiling = heartbeat_->ceiling();
    outcome_.elapsed_seconds = to_seconds(meter_.elapsed_at(end));
    if (trip_) outcome_.trip_to_empty_seconds = to_seconds(end - trip_at_);
    if (auto written = kill_path_.checkpoint_written_at()) {
      outcome_.checkpoint_written_after_seconds = to_seconds(*written - *meter_.launched_at());
    }
    outcome_.tracker = progress_tracker(plan_.guards, outcome_.progress);
    RunEnd how{guard_lost_, trip_, launch_failed_, main_exited_, main_status_, plan_.gave_terminal};
    settle_end(outcome_, how);
    // Queued only: the notifier delivers on its own thread.
    for (const RunEvent& event : end_events(outcome_, how, meter_.elapsed_at(end))) {
      notifier_.notify(event);
    }
    io_.stop();
  }

  SupervisorPlan plan_;
  NullNotifier no_notifier_;
  Notifier& notifier_ = plan_.notifier ? *plan_.notifier : no_notifier_;
  Reporter& reporter_;

  asio::io_context io_;
  std::unique_ptr<GuardLink> guard_;
  std::unique_ptr<Terminal> terminal_;
  std::unique_ptr<ProcessTree> tree_;
  asio::signal_set signals_;
  asio::signal_set children_;
  asio::steady_timer trip_timer_, watchdog_timer_;
  int kill_rounds_ = 0;
  SteadyKillPathTimer kill_timer_;
  KillPath kill_path_;
  Meter meter_;
  Money reserve_;
  std::vector<std::unique_ptr<RunPart>> parts_;
  HeartbeatPart* heartbeat_ = nullptr;
  MetricsRunPart* metrics_ = nullptr;  // none: no metrics directory
  JobControl* job_control_ = nullptr;
  CheckpointWatch* checkpoint_ = nullptr;
  std::optional<LiveProgress> live_progress_;  // the guard part's, for the heartbeats

  std::optional<Trip> trip_;
  TimePoint trip_at_{};
  bool would_stop_reported_ = false;
  int pending_signal_ = 0;
  bool main_exited_ = false;
  int main_status_ = 0;
  bool guard_reaped_ = false;
  bool guard_lost_ = false;
  bool launch_failed_ = false;
  RunOutcome outcome_;
};

Supervisor::Supervisor(SupervisorPlan plan, GuardHandle guard, Reporter& reporter,
                       std::shared_ptr<Ledger> ledger)
    : Supervisor(std::move(plan), guard_link(guard), stdin_terminal(), reporter,
                 std::move(ledger)) {}

Supervisor::Supervisor(SupervisorPlan plan, std::unique_ptr<GuardLink> guard,
                       std::unique_ptr<Terminal> terminal, Reporter& reporter,
                       std::shared_ptr<Ledger> ledger)
    : impl_(std::make_unique<Impl>(std::move(plan), std::move(guard), std::move(terminal), reporter,
                                   std::move(ledger))) {}

Supervisor::~Supervisor() = default;

RunOutcome Supervisor::run() {
  return impl_->run();
}

std::string Supervisor::record_final(const RunFinal& final, Nanos timeout,
                                     const std::vector<std::int64_t>& outbox_delivered) {
  return impl_->record_final(final, timeout, outbox_delivered);
}

}  // namespace spendcap
