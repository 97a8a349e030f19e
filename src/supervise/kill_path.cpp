#include "spendcap/supervise/kill_path.hpp"

#include <algorithm>

#include "spendcap/policy/policy.hpp"
#include "spendcap/process/escalation.hpp"

namespace spendcap {

KillPath::KillPath(ProcessTree& tree, KillPathTimer& timer, int checkpoint_signal, Say say)
    : tree_(&tree), timer_(timer), checkpoint_signal_(checkpoint_signal), say_(std::move(say)) {}

bool KillPath::trip(TimePoint at, const ShutdownTimes& times, std::optional<TimePoint> empty_by,
                    const std::string& headline) noexcept {
  KillDeadlines planned = plan_kill(at, times, empty_by);
  if (phase_ == KillPhase::draining) {
    // Already terminating what the command left behind: only the deadline can get closer.
    if (planned.kill_at < deadlines_.kill_at) {
      deadlines_.kill_at = planned.kill_at;
      timer_.arm(deadlines_.kill_at);
    }
    return false;
  }
  if (phase_ != KillPhase::running) return false;
  deadlines_ = planned;
  kill_after_ = times.kill_after;
  // Act first, then tell: the lines are queued for a writer thread, but the kill path never waits
  // on anything it does not have to.
  int signalled = 0;
  if (checkpoint_signal_ != 0) {
    try {
      signalled = tree_->signal_catchers(checkpoint_signal_);
    } catch (...) {
    }
  }
  checkpoint_signalled_ = signalled;
  say_(headline);
  if (signalled == 0) {
    grace_skipped_ = true;
    say_(checkpoint_signal_ == 0 ? "no checkpoint signal: no checkpoint was taken; terminating now"
                                 : "no process catches " + signal_name(checkpoint_signal_) +
                                       ": no checkpoint was taken; grace skipped, terminating now");
    terminate();
    return true;
  }
  phase_ = KillPhase::grace;
  say_("sent " + signal_name(checkpoint_signal_) + " to " + std::to_string(signalled) +
       (signalled == 1 ? " process" : " processes") + "; grace " +
       format_duration(deadlines_.term_at - at));
  timer_.arm(deadlines_.term_at);
  return true;
}

void KillPath::main_exited(TimePoint at, const std::string& how, Nanos kill_after,
                           std::optional<TimePoint> empty_by) noexcept {
  switch (phase_) {
    case KillPhase::running:
      // What the command left behind costs money too: SIGTERM now, SIGKILL after kill-after.
      deadlines_ = plan_kill(at, ShutdownTimes{Nanos(0), kill_after}, empty_by);
      kill_after_ = kill_after;
      say_("the command ended (" + how + "); stopping the processes it left behind");
      phase_ = KillPhase::draining;
      send_term();
      break;
    case KillPhase::grace:
      say_("the command ended during the grace (" + how + ")");
      terminate();
      break;
    default:
      break;
  }
}

bool KillPath::checkpoint_done() noexcept {
  if (phase_ != KillPhase::grace) return false;
  if (checkpoint_written_) return true;
  checkpoint_written_ = true;
  TimePoint at = timer_.now();
  checkpoint_written_at_ = at;
  TimePoint exit_by = std::min(deadlines_.term_at, at + exit_window_);
  if (exit_by <= at) {
    say_("the job wrote its checkpoint: terminating now");
    terminate();
    return true;
  }
  // The grace now ends at exit_by: the main process exiting before it ends it sooner, and what
  // it leaves behind gets SIGTERM then (main_exited).
  deadlines_.term_at = exit_by;
  say_("the job wrote its checkpoint: it has " + format_duration(exit_by - at) +
       " to exit by itself before SIGTERM");
  timer_.arm(exit_by);
  return true;
}

void KillPath::skip_ahead() noexcept {
  if (phase_ == KillPhase::grace) {
    terminate();
  } else if (phase_ == KillPhase::terminating || phase_ == KillPhase::draining) {
    kill();
  }
}

void KillPath::kill_now() noexcept {
  kill();
}

void KillPath::on_timer() noexcept {
  switch (phase_) {
    case KillPhase::grace:
      terminate();
      break;
    case KillPhase::terminating:
    case KillPhase::draining:
    case KillPhase::killing:
      kill();
      break;
    default:
      break;
  }
}

void KillPath::done() noexcept {
  phase_ = KillPhase::done;
  timer_.cancel();
}

void KillPath::terminate() noexcept {
  if (phase_ == KillPhase::terminating || phase_ == KillPhase::killing ||
      phase_ == KillPhase::done) {
    return;
  }
  // A grace that ended early (checkpoint done, main exited, a second signal) moves kill-after up
  // with it.
  deadlines_.kill_at = std::min(deadlines_.kill_at, timer_.now() + kill_after_);
  phase_ = KillPhase::terminating;
  send_term();
}

void KillPath::send_term() noexcept {
  terminate_tree(*tree_);
  timer_.arm(deadlines_.kill_at);
}

void KillPath::kill() noexcept {
  if (phase_ == KillPhase::done) return;
  phase_ = KillPhase::killing;
  kill_tree(*tree_);
  timer_.arm(timer_.now() + kKillRepeat);
}

}  // namespace spendcap
