#include "spendcap/supervise/supervisor.hpp"

#include <signal.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstring>
#include <map>

#include "spendcap/base/acting_user.hpp"
#include "spendcap/ledger/async_ledger.hpp"
#include "spendcap/spend/meter.hpp"
#include "spendcap/supervise/kill_path.hpp"
#include "spendcap/supervise/metrics_part.hpp"
#include "spendcap/supervise/run_part.hpp"
#include "spendcap/supervise/signal_forward.hpp"

namespace asio = boost::asio;

namespace spendcap {

namespace {

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by " + signal_name(WTERMSIG(status));
  return "status " + std::to_string(status);
}

std::string percent(double fraction) {
  return std::to_string(static_cast<int>(fraction * 100 + 0.5)) + "%";
}

// "79% of the run budget spent: $0.3163 of $0.4000": the percentage is the figures' own ratio at
// the moment printed, not the threshold crossed (a heartbeat can cross several at once).
std::string spent_of(Money spent, Money budget, const std::string& what,
                     const std::string& currency) {
  double fraction = budget.micros > 0 ? static_cast<double>(spent.micros) / budget.micros : 0;
  return percent(fraction) + " of the " + what + " spent: " + format_money(spent, currency) +
         " of " + format_money(budget, currency);
}

// "budget:run", "budget:job:KEY", "budget:team:vision".
std::string budget_reason(const Scope& scope) {
  return scope.kind == ScopeKind::run ? "budget:run" : "budget:" + to_string(scope);
}

// The kill path's timer on the event loop. A wait that already completed when it was re-armed still
// runs its handler; the generation keeps it from reaching the kill path.
class SteadyKillPathTimer final : public KillPathTimer {
 public:
  SteadyKillPathTimer(asio::io_context& io, std::function<void()> fire)
      : timer_(io), fire_(std::move(fire)) {}
  TimePoint now() const override { return spendcap::now(); }
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
  std::function<void()> fire_;
  unsigned generation_ = 0;
};

// Warnings as the run's own spend crosses the thresholds of its budget, each at its computed
// moment.
class RunThresholds final : public RunPart {
 public:
  RunThresholds(asio::io_context& io, const Reporter& reporter, const Meter& meter,
                const SupervisorPlan& plan, Notifier& notifier)
      : timer_(io),
        reporter_(reporter),
        meter_(meter),
        plan_(plan),
        tracker_(plan.warn_at),
        notifier_(notifier) {}
  void on_launched(TimePoint) override { arm(); }
  void on_stopping() override { stop(); }
  void on_finish() override { stop(); }

 private:
  void stop() {
    stopped_ = true;
    timer_.cancel();
  }

  void arm() {
    if (stopped_ || !plan_.run_budget || !meter_.launched_at()) return;
    auto fraction = tracker_.next();
    if (!fraction) return;
    Money at_spend = Money{static_cast<std::int64_t>(*fraction * plan_.run_budget->micros)};
    auto at = ceiling_reached_time(*meter_.launched_at(), plan_.rate_per_hour, at_spend);
    if (!at) return;
    timer_.expires_at(*at);
    timer_.async_wait([this](auto error) {
      if (error || stopped_) return;
      Money spend = meter_.spend_at(now());
      if (!tracker_.crossed(spend, *plan_.run_budget).empty()) {
        std::string line = spent_of(spend, *plan_.run_budget, "run budget", plan_.currency);
        reporter_.line(line);
        notifier_.notify(RunEvent{"warning", line.substr(0, line.find(':')), "run", line, spend});
      }
      arm();
    });
  }

  asio::steady_timer timer_;
  const Reporter& reporter_;
  const Meter& meter_;
  const SupervisorPlan& plan_;
  ThresholdTracker tracker_;
  Notifier& notifier_;
  bool stopped_ = false;
};

// The terminal title (--title): the spend, and the run's budget, every interval.
class Title final : public RunPart {
 public:
  Title(asio::io_context& io, Reporter& reporter, const Meter& meter, const SupervisorPlan& plan)
      : timer_(io), reporter_(reporter), meter_(meter), plan_(plan) {}
  void on_launched(TimePoint) override { update(); }
  void on_finish() override {
    finished_ = true;
    timer_.cancel();
  }

 private:
  void update() {
    if (finished_ || !reporter_.title_enabled()) return;
    Money spend = meter_.spend_at(now());
    std::string text = "spendcap " + format_money(spend, plan_.currency);
    if (plan_.run_budget) text += " / " + format_money(*plan_.run_budget, plan_.currency);
    reporter_.title(text);
    timer_.expires_after(plan_.interval);
    timer_.async_wait([this](auto error) {
      if (!error) update();
    });
  }

  asio::steady_timer timer_;
  Reporter& reporter_;
  const Meter& meter_;
  const SupervisorPlan& plan_;
  bool finished_ = false;
};

// After this many SIGKILL rounds (1 s at kKillRepeat) with the tree not yet empty, an isolated
// guard is SIGKILLed itself.
constexpr int kKillRoundsBeforeGuard = 50;

}  // namespace

void block_stop_signals(bool block) {
  sigset_t set;
  sigemptyset(&set);
  for (int signal : kStopSignals) sigaddset(&set, signal);
  ::sigprocmask(block ? SIG_BLOCK : SIG_UNBLOCK, &set, nullptr);
}

int take_pending_stop_signal() {
  sigset_t pending;
  sigpending(&pending);
  for (int signal : kStopSignals) {
    if (sigismember(&pending, signal)) {
      sigset_t one;
      sigemptyset(&one);
      sigaddset(&one, signal);
      timespec zero{};
      ::sigtimedwait(&one, nullptr, &zero);
      return signal;
    }
  }
  return 0;
}

class Supervisor::Impl {
 public:
  Impl(SupervisorPlan plan, GuardHandle guard, Reporter& reporter, std::shared_ptr<Ledger> ledger)
      : plan_(std::move(plan)),
        guard_(guard),
        reporter_(reporter),
        tree_(plan_.make_tree(guard.pid)),
        events_(io_, guard.events_fd),
        signals_(io_),
        job_control_(io_, SIGTSTP, SIGCONT),
        children_(io_, SIGCHLD),
        trip_timer_(io_),
        heartbeat_timer_(io_),
        watchdog_timer_(io_),
        kill_timer_(io_,
                    [this] {
                      kill_path_.on_timer();
                      last_resort();
                    }),
        kill_path_(*tree_, kill_timer_, plan_.checkpoint_signal,
                   [this](const std::string& line) { reporter_.line(line); }),
        meter_(plan_.rate_per_hour - plan_.storage.rate_per_hour),
        reserve_(shutdown_reserve(plan_.rate_per_hour, plan_.on_trip)) {
    for (int signal : kStopSignals) signals_.add(signal);
    apply_grant(plan_.grant);
    if (ledger) {
      ledger_ = std::make_unique<AsyncLedger>(
          std::move(ledger), [this](std::function<void()> done) { asio::post(io_, done); });
    }
    parts_.push_back(std::make_unique<RunThresholds>(io_, reporter_, meter_, plan_, notifier_));
    parts_.push_back(std::make_unique<Title>(io_, reporter_, meter_, plan_));
    if (plan_.preemption_part) {
      parts_.push_back(plan_.preemption_part(io_, reporter_, [this](const std::string& reason) {
        if (running() && meter_.launched_at()) {
          trip(Trip{TripKind::preemption, reason, 0}, now());
        }
      }));
    }
    parts_.push_back(std::make_unique<SignalForwarder>(
        io_, reporter_, [this]() -> ProcessTree& { return *tree_; }, plan_.forward_signals));
    kill_path_.set_exit_window(plan_.exit_window);
    parts_.push_back(make_gpu_sampler(
        io_, reporter_, meter_, plan_.gpu, plan_.interval, [this] { return tree_->members(); },
        [this](const Trip& stop) {
          if (!trip_ && running()) trip(stop, now());
        },
        outcome_.gpu));
    if (!plan_.metrics.dir.empty()) {
      parts_.push_back(make_metrics_part(
          io_, meter_, plan_, [this] { return ceiling_; }, outcome_.gpu,
          [this] { return team_budgets(); }));
    }
    if (!plan_.storage.dir.empty()) {
      meter_.charge_storage(plan_.storage.per_gb_month, plan_.storage.max_gb);
      parts_.push_back(make_storage_part(io_, reporter_, meter_, plan_.storage));
    }
    parts_.push_back(make_guard_part(
        io_, reporter_, meter_, plan_,
        [this](const Trip& runaway) {
          if (running()) trip(runaway, now());
        },
        outcome_.progress));
    if (plan_.guards.respawn) {
      parts_.push_back(
          make_respawn_part(io_, reporter_, plan_, guard_.pid, [this](const Trip& runaway) {
            if (running()) trip(runaway, now());
          }));
    }
    outcome_.run_id = plan_.run_id;
    outcome_.currency = plan_.currency;
    outcome_.rate_per_hour = plan_.rate_per_hour;
    outcome_.budget = plan_.run_budget;
  }

  ~Impl() {
    if (inotify_) inotify_->close();
    if (guard_.control_fd >= 0) ::close(guard_.control_fd);
  }

  RunOutcome run() {
    read_guard_events();
    wait_for_signals();
    pass_on_job_control();
    reap_children();
    // Stop signals that came while the run was being set up are delivered now.
    block_stop_signals(false);
    // Every thread of the run is running (reporter, webhooks, ledger worker): the job may start.
    send_guard_order(guard_.control_fd, GuardOrderKind::launch, 0);
    io_.run();
    return outcome_;
  }

  // The run's team budgets for the metrics summary: a bounded wait on the ledger's worker (the
  // result is shared: a late answer after the wait writes into it, not into a dead frame).
  std::vector<TeamBudget> team_budgets() {
    auto views = std::make_shared<std::vector<BudgetView>>();
    if (!ledger_ || plan_.metrics.team.empty()) return {};
    std::string error = ledger_->call_and_wait(
        [views](Ledger& ledger) { *views = ledger.budgets(); }, std::chrono::seconds(2));
    if (!error.empty()) return {};
    std::vector<TeamBudget> out;
    for (const BudgetView& view : *views) {
      if (view.rule.scope.kind != ScopeKind::team || view.rule.scope.name != plan_.metrics.team)
        continue;
      out.push_back(TeamBudget{to_string(view.rule.period), view.rule.amount, view.remaining()});
    }
    return out;
  }

  std::string record_final(const RunFinal& final, Nanos timeout) {
    if (!ledger_) return "no ledger";
    return ledger_->call_and_wait([final](Ledger& ledger) { ledger.finish_run(final); }, timeout);
  }

 private:
  bool finished() const { return kill_path_.phase() == KillPhase::done; }
  bool running() const { return kill_path_.phase() == KillPhase::running; }

  // ---- the guard's reports ----

  void read_guard_events() {
    events_.async_read_some(asio::buffer(buffer_), [this](auto error, size_t bytes) {
      pending_.append(buffer_.data(), bytes);
      while (pending_.size() >= sizeof(GuardEvent)) {
        GuardEvent event;
        std::memcpy(&event, pending_.data(), sizeof event);
        pending_.erase(0, sizeof event);
        on_guard_event(event);
      }
      if (finished()) return;
      if (error) {
        guard_lost();
        return;
      }
      read_guard_events();
    });
  }

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
        on_job_stopped();
        break;
      case GuardEventKind::orphan_exited:
        for (auto& part : parts_) part->on_orphan_exited(event.pid, event.value);
        break;
    }
  }

  void on_launched(TimePoint at) {
    meter_.launched(at);
    print_start_line();
    arm_trip_timer();
    for (auto& part : parts_) part->on_launched(at);
    arm_heartbeat();
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
      reporter_.line("got " + signal_name(signal) + ": stopping the job");
      trip(Trip{TripKind::signal, "signal:" + signal_name(signal), signal}, now());
      return;
    }
    // A second signal hurries the kill path along, one step per signal.
    reporter_.line("got " + signal_name(signal) + " again: skipping ahead");
    kill_path_.skip_ahead();
  }

  // Ctrl-Z on spendcap's group (no terminal given to the job) or `kill -TSTP spendcap` pauses the
  // job instead of spendcap: the supervisor must keep its clock and its trip.
  void pass_on_job_control() {
    job_control_.async_wait([this](auto error, int signal) {
      if (error || finished()) return;
      if (signal == SIGCONT && (paused_ || in_background_)) {
        on_continued();
      } else if (meter_.launched_at()) {
        tree_->signal_all(signal);
      }
      pass_on_job_control();
    });
  }

  // ---- job control on a terminal (see supervisor.hpp) ----

  // Ctrl-Z stopped the job while it had the terminal: say so, arm the waker, stop spendcap.
  void on_job_stopped() {
    if (!plan_.gave_terminal || !running() || paused_ || !meter_.launched_at()) return;
    paused_ = true;
    pid_t foreground = ::tcgetpgrp(STDIN_FILENO);
    if (foreground > 0 && foreground != ::getpgrp()) job_pgrp_ = foreground;
    std::string line =
        "job paused; still accruing " + format_money(plan_.rate_per_hour, plan_.currency) + "/h";
    std::optional<TimePoint> wake = wake_for_trip();
    if (wake) line += "; the trip stays armed";
    reporter_.line(line + " (fg resumes it)");
    reporter_.flush();  // the line comes before the shell's "Stopped"
    if (wake) start_waker(*wake);
    stop_self();
  }

  // A heartbeat before the budget's trip (the grant may be raised by then), and never later
  // than the trip: the moment a stopped spendcap must be running again to enforce it.
  std::optional<TimePoint> wake_for_trip() const {
    if (plan_.mode != Mode::enforce || plan_.rate_per_hour.micros == 0) return std::nullopt;
    auto at = budget_trip_time(*meter_.launched_at(), plan_.rate_per_hour, allowed_, reserve_);
    if (!at) return std::nullopt;
    return std::max(now(), *at - plan_.sync);
  }

  // A child of spendcap (not of the tree) that sleeps until `at`, then SIGCONTs spendcap and
  // exits 0. Forked from a process with threads: the child makes only async-signal-safe calls.
  // PDEATHSIG: it never outlives spendcap.
  void start_waker(TimePoint at) {
    pid_t parent = ::getpid();
    timespec until{};
    std::int64_t ns = to_ns(at);
    until.tv_sec = ns / 1000000000;
    until.tv_nsec = ns % 1000000000;
    pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      ::close_range(3, ~0U, 0);  // the guard's control pipe must see EOF when spendcap dies
      while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr) == EINTR) {
      }
      ::kill(parent, SIGCONT);
      ::_exit(0);
    }
    if (pid > 0) {
      waker_pid_ = pid;
      wake_at_ = at;
    }
  }

  // Stops spendcap by SIGTSTP's default action, so the shell reports it as Ctrl-Z would.
  void stop_self() {
    in_background_ = true;
    struct sigaction stop {};
    stop.sa_handler = SIG_DFL;
    sigemptyset(&stop.sa_mask);
    struct sigaction asio_handler {};
    ::sigaction(SIGTSTP, &stop, &asio_handler);
    ::raise(SIGTSTP);  // returns once continued: by the shell (fg, bg) or by the waker
    ::sigaction(SIGTSTP, &asio_handler, nullptr);
  }

  // Whether the waker woke spendcap (it exited after its SIGCONT); either way it is gone after.
  bool collect_waker() {
    if (waker_pid_ <= 0) {
      bool fired = waker_fired_;
      waker_fired_ = false;
      return fired;
    }
    int status = 0;
    pid_t reaped = ::waitpid(waker_pid_, &status, WNOHANG);
    if (reaped == 0) {
      ::kill(waker_pid_, SIGKILL);
      while (::waitpid(waker_pid_, &status, 0) < 0 && errno == EINTR) {
      }
    }
    waker_pid_ = -1;
    waker_fired_ = false;
    return WIFEXITED(status) || now() >= wake_at_;
  }

  // SIGCONT to spendcap while it was paused or left in the background.
  void on_continued() {
    bool foreground = ::tcgetpgrp(STDIN_FILENO) == ::getpgrp();
    if (paused_ && collect_waker() && !foreground) {
      // Woken for the trip: the job stays paused, spendcap enforces from the background.
      reporter_.line("awake to enforce the trip; the job stays paused (fg resumes it)");
      arm_heartbeat_now();
      return;
    }
    if (foreground) {
      in_background_ = false;
      if (job_pgrp_ > 0) ::tcsetpgrp(STDIN_FILENO, job_pgrp_);  // SIGTTOU is ignored
    }
    if (paused_) {
      paused_ = false;
      tree_->signal_all(SIGCONT);
      reporter_.line(std::string("job resumed") + (foreground ? "" : " in the background"));
    }
  }

  // After a stop, the grant is stale: ask at once rather than a sync later.
  void arm_heartbeat_now() {
    if (!ledger_) return;
    asio::post(io_, [this] {
      if (!finished()) heartbeat();
    });
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
  // WNOWAIT leaves the guard to the reaping below.
  void note_guard_exit(int options) {
    if (guard_reaped_ || guard_lost_ || guard_.pid <= 0) return;
    siginfo_t info{};
    int rc = 0;
    while ((rc = ::waitid(P_PID, static_cast<id_t>(guard_.pid), &info,
                          WEXITED | WNOWAIT | options)) < 0 &&
           errno == EINTR) {
    }
    if (rc == 0 && info.si_pid == guard_.pid) reporter_.freeze_job_write_count();
  }

  // Reaps spendcap's own children: the guard at the end, orphans when spendcap is PID 1 (as tini
  // does) or when the guard died.
  void reap_now() {
    note_guard_exit(WNOHANG);
    while (true) {
      int status = 0;
      pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid > 0) {
        if (pid == guard_.pid) guard_reaped_ = true;
        if (pid == waker_pid_) {
          waker_pid_ = -1;
          waker_fired_ = WIFEXITED(status);
        }
        continue;
      }
      if (pid < 0 && errno == EINTR) continue;
      if (pid < 0 && errno == ECHILD && guard_lost_ && !finished()) on_tree_empty(now());
      return;
    }
  }

  // ---- the trip ----

  void arm_trip_timer() {
    if (trip_ || !running() || !meter_.launched_at()) return;
    auto at = budget_trip_time(*meter_.launched_at(), plan_.rate_per_hour, allowed_, reserve_);
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
    trip(binding_ ? Trip{TripKind::budget, budget_reason(*binding_), 0}
                  : Trip{TripKind::ledger_unreachable, "ledger-unreachable", 0},
         planned);
  }

  // Every trip comes through here: the budget timer (a budget, or the ledger unreachable), a stop
  // order, a signal to spendcap. `at` is the trip's planned moment. In warn mode a budget trip is
  // reported and the run goes on; a stop order or a signal stops it in either mode.
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
    stop_other_nodes(trip);
    outcome_.tripped_after_seconds = to_seconds(at - *meter_.launched_at());
    bool started = kill_path_.trip(at, times, empty_by(), trip_headline(trip, at));
    // A trip while the job is paused still stops it: continued, it can take its checkpoint.
    if (paused_) {
      paused_ = false;
      tree_->signal_all(SIGCONT);
    }
    if (!started) return;
    outcome_.checkpoint_signalled = kill_path_.checkpoint_signalled();
    outcome_.grace_skipped = kill_path_.grace_skipped();
    // Watching starts once the grace is armed: a checkpoint already written ends it at once. The
    // kill path's timer acts by phase, so this order cannot replace the SIGKILL step with the grace
    // step (it could when each arming carried its own step).
    if (kill_path_.phase() == KillPhase::grace) watch_checkpoint_done();
  }

  // A multi-node run stops as one: this node's own trip is placed as a stop order on the run (its
  // nodes' job key), which every other node takes at its next heartbeat. A stop order is not
  // placed again: it reached every node already.
  void stop_other_nodes(const Trip& trip) {
    if (plan_.multi_node_run_id.empty()) return;
    if (trip.kind == TripKind::stop_order) return;
    outcome_.first_trip = plan_.node + " (" + trip.reason + ")";
    if (!ledger_) return;
    Scope run{ScopeKind::job, plan_.multi_node_run_id};
    std::string reason = plan_.node + " tripped: " + trip.reason;
    std::string by = kNodePrefix + plan_.node;
    ledger_->call([run, reason, by](Ledger& ledger) { ledger.place_stop_order(run, reason, by); },
                  [this](const std::string& error) {
                    if (!error.empty()) {
                      reporter_.error("ledger: the run's other nodes were not told to stop (" +
                                      error + "); they stop by their own trips");
                    }
                  });
  }

  // The node named by a stop order another node of the run placed ("node-a (runaway:stall)"),
  // else "".
  std::string first_trip_of(const StopOrder& order) const {
    if (plan_.multi_node_run_id.empty() || order.scope.kind != ScopeKind::job ||
        order.scope.name != plan_.multi_node_run_id || !order.placed_by.starts_with(kNodePrefix)) {
      return "";
    }
    std::string node = order.placed_by.substr(std::string(kNodePrefix).size());
    std::string prefix = node + " tripped: ";
    std::string why =
        order.reason.starts_with(prefix) ? order.reason.substr(prefix.size()) : order.reason;
    return node + " (" + why + ")";
  }
  static constexpr const char* kNodePrefix = "node ";

  // "budget:run tripped after 7s: $0.07 spent + $0.03 reserve reaches the ceiling $0.10".
  std::string trip_headline(const Trip& trip, TimePoint at) const {
    Money spend = meter_.spend_at(at);
    std::string line = trip.reason + " tripped after " +
                       format_duration(at - *meter_.launched_at()) + ": " +
                       format_money(spend, plan_.currency) + " spent";
    if (trip.kind == TripKind::budget || trip.kind == TripKind::ledger_unreachable) {
      line += " + " + format_money(reserve_, plan_.currency) + " reserve reaches the ceiling " +
              format_money(ceiling_, plan_.currency);
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
    if (ledger_) {
      std::string id = plan_.run_id;
      ledger_->call([id, reason](Ledger& ledger) { ledger.record_would_stop(id, reason); },
                    [this](const std::string& error) {
                      if (!error.empty()) reporter_.error("ledger: " + error);
                    });
    }
  }

  // The moment spend would reach the ceiling: no process may outlive it.
  std::optional<TimePoint> empty_by() const {
    return ceiling_reached_time(*meter_.launched_at(), plan_.rate_per_hour, ceiling_);
  }

  // The grace ends early when the job says its checkpoint is written.
  void watch_checkpoint_done() {
    if (plan_.checkpoint_done_path.empty()) return;
    std::string dir = plan_.checkpoint_done_path.substr(0, plan_.checkpoint_done_path.rfind('/'));
    int fd = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (fd < 0) return;
    // Watch first, then look: a file created in between is seen by one or the other.
    ::inotify_add_watch(fd, dir.c_str(), IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE);
    inotify_ = std::make_unique<asio::posix::stream_descriptor>(io_, fd);
    if (checkpoint_written()) return;
    read_inotify();
  }

  void read_inotify() {
    inotify_->async_read_some(asio::buffer(inotify_buffer_), [this](auto error, size_t) {
      if (error) return;
      if (kill_path_.phase() != KillPhase::grace) {
        inotify_->close();
        return;
      }
      if (!checkpoint_written()) read_inotify();
    });
  }

  bool checkpoint_written() {
    if (access_as_user(plan_.checkpoint_done_path.c_str(), F_OK) != 0) return false;
    if (kill_path_.checkpoint_done()) inotify_->close();
    return true;
  }

  // ---- heartbeats ----

  void arm_heartbeat() {
    if (!ledger_) return;
    heartbeat_timer_.expires_after(plan_.sync);
    heartbeat_timer_.async_wait([this](auto error) {
      if (error || finished()) return;
      heartbeat();
      arm_heartbeat();
    });
  }

  void heartbeat() {
    if (heartbeat_in_flight_) return;  // a slow ledger: the trip timer guards the ceiling
    heartbeat_in_flight_ = true;
    Money spend = meter_.spend_at(now());
    Money claim = claim_ahead(plan_.rate_per_hour, plan_.claim_horizon, plan_.sync, reserve_);
    // A heartbeat asks for more only when what its ceiling has left ahead of the spend falls
    // below its reserve plus half a claim (and never below two syncs of burn): most heartbeats then
    // raise nothing, and the ledger writes only the run's own row (issue 23: a hot team budget's
    // rows are written once per half claim, not at every heartbeat). A limited grant asks every
    // time (other runs may have released some), and warn mode keeps asking as before.
    Money keep = reserve_ + std::max(Money{(claim - reserve_).micros / 2},
                                     cost_of(plan_.rate_per_hour, 2 * plan_.sync));
    bool raise = binding_ || plan_.mode != Mode::enforce || ceiling_ - spend < keep;
    Money want = raise ? spend + claim : ceiling_;
    // Once tripped the run only shuts down, within the ceiling it holds: it asks for nothing more,
    // leaving the rest of the budget to other runs.
    if (trip_) want = ceiling_;
    auto grant = std::make_shared<Grant>();
    std::string id = plan_.run_id;
    ledger_->call(
        [id, spend, want, grant](Ledger& ledger) { *grant = ledger.heartbeat(id, spend, want); },
        [this, grant](const std::string& error) {
          heartbeat_in_flight_ = false;
          on_heartbeat(error, *grant);
        });
  }

  void on_heartbeat(const std::string& error, const Grant& grant) {
    if (finished()) return;
    if (!error.empty()) {
      if (!ledger_failing_) {
        reporter_.error("ledger unreachable (" + error + "); the run goes on within its ceiling " +
                        format_money(ceiling_, plan_.currency));
      }
      ledger_failing_ = true;
      return;
    }
    if (ledger_failing_) reporter_.line("ledger reachable again");
    ledger_failing_ = false;
    apply_grant(grant);
    tell_guard_deadline();
    for (const ScopeUse& use : grant.scopes) {
      // A run that is shutting down warns no more: a warning after the trip only confuses.
      if (!running() || trip_) break;
      auto& tracker =
          scope_thresholds_.try_emplace(to_string(use.scope), plan_.warn_at).first->second;
      if (!tracker.crossed(use.spent, use.amount).empty()) {
        std::string line = spent_of(
            use.spent, use.amount, to_string(use.scope) + " budget (" + to_string(use.period) + ")",
            plan_.currency);
        reporter_.line(line);
        notifier_.notify(RunEvent{"warning", line.substr(0, line.find(':')), to_string(use.scope),
                                  line, meter_.spend_at(now())});
      }
    }
    if (grant.stop && !trip_ && meter_.launched_at()) {
      const StopOrder& order = *grant.stop;
      std::string line = "stop order on " + to_string(order.scope) + " by " + order.placed_by +
                         (order.reason.empty() ? "" : " (" + order.reason + ")");
      reporter_.line(line);
      outcome_.first_trip = first_trip_of(order);
      notifier_.notify(RunEvent{"stop-order", "stop-order", to_string(order.scope), line,
                                meter_.spend_at(now())});
      trip(Trip{TripKind::stop_order, "stop-order", 0}, now());
      return;
    }
    arm_trip_timer();
  }

  void apply_grant(const Grant& grant) {
    ceiling_ = grant.ceiling;
    allowed_ = grant.allowed;
    binding_ = grant.binding;
  }

  // ---- the guard's watchdog: a tick every interval, and the deadline at each grant ----

  void tell_guard() {
    if (finished()) return;
    send_guard_order(guard_.control_fd, GuardOrderKind::tick, 0);
    watchdog_timer_.expires_after(plan_.interval);
    watchdog_timer_.async_wait([this](auto error) {
      if (!error) tell_guard();
    });
  }

  void tell_guard_deadline() {
    if (!meter_.launched_at()) return;
    // In warn mode nothing is stopped, by the supervisor or by the guard.
    auto deadline = plan_.mode == Mode::enforce ? empty_by() : std::nullopt;
    send_guard_order(guard_.control_fd, GuardOrderKind::deadline, deadline ? to_ns(*deadline) : 0);
  }

  // The last resort, after 1 s of SIGKILL rounds with the tree still there: a guard that is the
  // init of its PID namespace takes every process of the namespace with it, whatever the walk
  // misses.
  void last_resort() {
    if (kill_path_.phase() != KillPhase::killing || !guard_.isolated || guard_lost_ ||
        guard_reaped_) {
      return;
    }
    if (++kill_rounds_ == kKillRoundsBeforeGuard) ::kill(guard_.pid, SIGKILL);
  }

  void print_start_line() {
    std::string line = "run " + plan_.run_id.substr(0, 8) + " started" +
                       (plan_.label.empty() ? "" : " (" + plan_.label + ")") + ": burn " +
                       format_money(plan_.rate_per_hour, plan_.currency) + "/h";
    if (plan_.run_budget) line += ", budget " + format_money(*plan_.run_budget, plan_.currency);
    line += ", reserve " + format_money(reserve_, plan_.currency) + " (grace " +
            format_duration(plan_.on_trip.grace) + " + kill-after " +
            format_duration(plan_.on_trip.kill_after) + " + 1s)";
    std::string trips = plan_.mode == Mode::warn ? "would trip" : "trips";
    auto trip_in = [&](Money ceiling) {
      auto at = budget_trip_time(*meter_.launched_at(), plan_.rate_per_hour, ceiling, reserve_);
      Nanos in = *at - *meter_.launched_at();
      return format_duration(in) + " at " +
             format_money(cost_of(plan_.rate_per_hour, in), plan_.currency);
    };
    std::optional<ScopeUse> tightest = tightest_scope();
    if (plan_.rate_per_hour.micros == 0) {
      line += "; burn rate 0: it never trips";
    } else if (!binding_ && tightest) {
      // A shared budget's remaining amount binds before the run's own: it is what stops the run,
      // unless other runs release some.
      Money left = tightest->amount - tightest->spent - (tightest->held - ceiling_);
      line += "; " + trips + " in " + trip_in(left) + " (" + budget_reason(tightest->scope) + ": " +
              format_money(left, plan_.currency) + " left of " +
              format_money(tightest->amount, plan_.currency) + ")";
    } else if (binding_) {
      // The budget that limits the grant is what stops the run, unless other runs release some.
      line += "; " + trips + " in " + trip_in(allowed_) + " (" + budget_reason(*binding_) + ")";
    } else if (plan_.run_budget) {
      line += "; its budget " + trips + " in " + trip_in(*plan_.run_budget) + "; ceiling " +
              format_money(ceiling_, plan_.currency) + " granted so far";
    } else {
      line += "; ceiling " + format_money(ceiling_, plan_.currency) +
              " granted so far, raised at each heartbeat while the budgets allow";
    }
    if (plan_.mode == Mode::warn) line += " (warn mode: nothing is stopped)";
    if (!plan_.isolation.empty()) line += "; isolation: " + plan_.isolation;
    if (!plan_.ledger.empty()) line += "; ledger " + plan_.ledger;
    reporter_.line(line);
  }

  // The shared scope whose remaining amount (its budget less what is spent and what other runs
  // hold) is smallest, when it is below the run's own budget: what will bind first.
  std::optional<ScopeUse> tightest_scope() const {
    std::optional<ScopeUse> tightest;
    std::optional<Money> tightest_left = plan_.run_budget;
    for (const ScopeUse& use : plan_.grant.scopes) {
      if (use.scope.kind == ScopeKind::run) continue;
      Money left = use.amount - use.spent - (use.held - ceiling_);
      if (!tightest_left || left < *tightest_left) {
        tightest = use;
        tightest_left = left;
      }
    }
    if (tightest &&
        !budget_trip_time(*meter_.launched_at(), plan_.rate_per_hour, *tightest_left, reserve_)) {
      return std::nullopt;
    }
    return tightest;
  }

  // ---- the end ----

  void finish() {
    if (finished()) return;
    kill_path_.done();
    // A stop signal from now on waits until the final row is written (run_command re-raises it).
    block_stop_signals(true);
    trip_timer_.cancel();
    heartbeat_timer_.cancel();
    watchdog_timer_.cancel();
    for (auto& part : parts_) part->on_finish();
    signals_.cancel();
    job_control_.cancel();
    if (inotify_) inotify_->close();
    // The guard exits right after reporting the tree empty.
    if (!guard_reaped_ && !guard_lost_) {
      note_guard_exit(0);
      while (::waitpid(guard_.pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
    children_.cancel();
    // Not from the background: the shell holds the terminal then.
    if (plan_.gave_terminal && !in_background_) take_back_terminal();
    if (waker_pid_ > 0) collect_waker();

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
    outcome_.ceiling = ceiling_;
    outcome_.elapsed_seconds = to_seconds(meter_.elapsed_at(end));
    if (trip_) outcome_.trip_to_empty_seconds = to_seconds(end - trip_at_);
    if (guard_lost_) {
      outcome_.status = RunStatus::killed;
      outcome_.reason = "guard-lost";
      outcome_.stopped_by_spendcap = true;
      outcome_.exit_code = to_int(ExitCode::internal);
    } else if (trip_) {
      // SIGTERM is how Slurm and Kubernetes take a node back (preemption, scancel, eviction).
      bool preempted = trip_->kind == TripKind::preemption ||
                       (trip_->kind == TripKind::signal && trip_->signal == SIGTERM);
      outcome_.status = preempted ? RunStatus::preempted : RunStatus::killed;
      outcome_.reason = trip_->reason;
      outcome_.stopped_by_spendcap = true;
      outcome_.exit_code = to_int(exit_code_for(*trip_));
      outcome_.spendcap_signal = trip_->signal;
      outcome_.reraise_signal = trip_->signal;
    } else if (launch_failed_ && !main_exited_) {
      outcome_.status = RunStatus::failed;
      outcome_.reason = "launch-failed";
      outcome_.exit_code = to_int(ExitCode::internal);
    } else {
      outcome_.exit_code = command_exit_status(main_status_);
      outcome_.status = outcome_.exit_code == 0 ? RunStatus::succeeded : RunStatus::failed;
      // A SIGTERM that spendcap did not send is the scheduler's: a plain scancel signals every
      // process of the job at once, and the job may die of it before spendcap's own is handled.
      if (WIFSIGNALED(main_status_) && WTERMSIG(main_status_) == SIGTERM) {
        outcome_.status = RunStatus::preempted;
      }
      outcome_.reason = "exited";
      // Ctrl-C on the terminal went to the job alone: dying by the same signal tells the calling
      // shell to stop its loop, as it would have without spendcap.
      bool interrupted = WIFSIGNALED(main_status_) &&
                         (WTERMSIG(main_status_) == SIGINT || WTERMSIG(main_status_) == SIGQUIT);
      if (plan_.gave_terminal && interrupted) outcome_.reraise_signal = WTERMSIG(main_status_);
      // Ctrl-C: the user ended it, it did not fail. The ledger keeps its statuses (killed: ended
      // by a signal); the reason and the end line say "interrupted".
      if (WIFSIGNALED(main_status_) && WTERMSIG(main_status_) == SIGINT) {
        outcome_.status = RunStatus::killed;
        outcome_.reason = "interrupted";
      }
    }
    notify_end();
    io_.stop();
  }

  // The run's end, to the webhooks: killed (or lost, the guard gone), else finished; and an
  // overrun besides. Queued only: the notifier delivers on its own thread.
  void notify_end() {
    RunEvent end;
    end.event = guard_lost_ ? "lost" : trip_ ? "killed" : "finished";
    // A scheduler or spot reclaim took the node back: not a stop by the budget, nor a finish.
    if (!guard_lost_ && outcome_.status == RunStatus::preempted) end.event = "preempted";
    end.reason = outcome_.reason;
    // "budget:team:vision" tripped the team's budget.
    if (end.reason.rfind("budget:", 0) == 0) end.scope = end.reason.substr(7);
    end.spend = outcome_.spend;
    end.exit_code = outcome_.exit_code;
    if (outcome_.gpu) end.gpu_utilisation = outcome_.gpu->summary.mean_utilisation();
    end.ended = true;
    end.message = to_string(outcome_.status) + " (" + outcome_.reason + ") after " +
                  format_duration(meter_.elapsed_at(*meter_.ended_at()));
    if (!outcome_.first_trip.empty())
      end.message += "; the run's first trip: " + outcome_.first_trip;
    notifier_.notify(end);
    if (outcome_.spend > outcome_.ceiling && outcome_.ceiling > Money{}) {
      end.event = "overrun";
      end.message = format_money(outcome_.spend - outcome_.ceiling, plan_.currency) +
                    " above its ceiling " + format_money(outcome_.ceiling, plan_.currency);
      notifier_.notify(end);
    }
  }

  // The command's group had the terminal: give it back to spendcap's group, or the caller (a
  // script's next command) would be stopped by SIGTTIN.
  void take_back_terminal() {
    sighandler_t previous = ::signal(SIGTTOU, SIG_IGN);
    ::tcsetpgrp(STDIN_FILENO, ::getpgrp());
    ::signal(SIGTTOU, previous);
  }

  SupervisorPlan plan_;
  NullNotifier no_notifier_;
  Notifier& notifier_ = plan_.notifier ? *plan_.notifier : no_notifier_;
  GuardHandle guard_;
  Reporter& reporter_;
  std::unique_ptr<ProcessTree> tree_;

  asio::io_context io_;
  asio::posix::stream_descriptor events_;
  asio::signal_set signals_;
  asio::signal_set job_control_;
  asio::signal_set children_;
  asio::steady_timer trip_timer_, heartbeat_timer_, watchdog_timer_;
  int kill_rounds_ = 0;
  SteadyKillPathTimer kill_timer_;
  KillPath kill_path_;
  std::vector<std::unique_ptr<RunPart>> parts_;
  std::unique_ptr<asio::posix::stream_descriptor> inotify_;
  std::array<char, 16 * sizeof(GuardEvent)> buffer_{};
  std::array<char, 4096> inotify_buffer_{};
  std::string pending_;

  std::unique_ptr<AsyncLedger> ledger_;
  Meter meter_;
  Money reserve_;
  Money ceiling_, allowed_;
  std::optional<Scope> binding_;
  bool heartbeat_in_flight_ = false;
  bool ledger_failing_ = false;
  bool would_stop_reported_ = false;
  std::map<std::string, ThresholdTracker> scope_thresholds_;

  std::optional<Trip> trip_;
  TimePoint trip_at_{};
  // Job control on a terminal.
  bool paused_ = false;         // Ctrl-Z stopped the job and it was not resumed
  bool in_background_ = false;  // spendcap stopped itself and did not get the terminal back
  pid_t job_pgrp_ = -1;         // the job's group, which had the terminal
  pid_t waker_pid_ = -1;
  bool waker_fired_ = false;
  TimePoint wake_at_{};
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
    : impl_(std::make_unique<Impl>(std::move(plan), guard, reporter, std::move(ledger))) {}

Supervisor::~Supervisor() = default;

RunOutcome Supervisor::run() {
  return impl_->run();
}

std::string Supervisor::record_final(const RunFinal& final, Nanos timeout) {
  return impl_->record_final(final, timeout);
}

}  // namespace spendcap
