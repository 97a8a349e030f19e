// The kill path of one run, as a phase machine over the process tree and a timer:
//
//   running --trip--> grace (checkpoint signal sent to the processes that catch it)
//                       | deadline, checkpoint done + exit window, main exited, second signal
//                       v
//   running --trip, nobody catches--> terminating (SIGTERM + SIGCONT to the tree)
//                       | kill-after, second signal
//                       v
//   killing (SIGKILL, repeated every kKillRepeat)  --tree empty--> done
//
//   running --main exits by itself--> draining (SIGTERM + SIGCONT to what it left behind)
//                       | kill-after, second signal  -> killing
//
// Deadlines run from the trip's planned moment and never pass the moment spend reaches the
// ceiling (plan_kill). The path owns the lines it prints about itself (through `Say`); the
// supervisor feeds it events (trip, main exited, checkpoint done, second signal, tree empty) and
// fires on_timer() when the armed moment comes. Single-threaded: called from the event loop only.
// noexcept and best-effort, as the rest of the kill path.
#pragma once

#include <signal.h>

#include <functional>
#include <optional>
#include <string>

#include "spendcap/base/duration.hpp"
#include "spendcap/process/process_tree.hpp"
#include "spendcap/spend/trip.hpp"

namespace spendcap {

// The clock and the one timer of the kill path. The supervisor's implementation is an Asio
// steady_timer; unit tests drive a fake clock.
class KillPathTimer {
 public:
  virtual ~KillPathTimer() = default;
  virtual TimePoint now() const = 0;
  // Calls KillPath::on_timer() at `at`, replacing any earlier arming. A firing that was already
  // due when it was replaced must not reach on_timer().
  virtual void arm(TimePoint at) = 0;
  virtual void cancel() = 0;
};

// What the kill path of a run is given: the shutdown times by cause, the checkpoint signal, the
// file that ends the grace early, and the exit window after it.
struct KillPlan {
  ShutdownTimes on_trip;             // --grace, --kill-after
  ShutdownTimes on_signal;           // when SIGTERM/SIGINT/SIGHUP to spendcap starts the kill path
  ShutdownTimes on_preemption;       // the times that fit a preemption notice's window
  int checkpoint_signal = SIGUSR1;   // 0 = none
  std::string checkpoint_done_path;  // $SPENDCAP_CHECKPOINT_DONE
  // After the checkpoint is written, how long the main process has to exit before SIGTERM.
  Nanos exit_window = kDefaultExitWindow;
};

enum class KillPhase { running, grace, terminating, killing, draining, done };

class KillPath {
 public:
  using Say = std::function<void(const std::string& line)>;

  // `checkpoint_signal` 0: none (the grace is always skipped).
  KillPath(ProcessTree& tree, KillPathTimer& timer, int checkpoint_signal, Say say);

  KillPhase phase() const { return phase_; }
  const KillDeadlines& deadlines() const { return deadlines_; }
  int checkpoint_signalled() const { return checkpoint_signalled_; }
  bool grace_skipped() const { return grace_skipped_; }
  int checkpoint_signal() const { return checkpoint_signal_; }
  // When the job's checkpoint file appeared during the grace; none: it did not.
  std::optional<TimePoint> checkpoint_written_at() const { return checkpoint_written_at_; }

  // The guard died: the tree is now rooted elsewhere.
  void use_tree(ProcessTree& tree) { tree_ = &tree; }

  // A trip at `at` (its planned moment, not when a late timer fired): the checkpoint signal to the
  // processes that catch it, then `headline` (what tripped) is said; the grace follows, or
  // SIGTERM at once when nobody catches the signal. `empty_by`: the moment spend reaches the
  // ceiling. While draining or killing only the SIGKILL deadline can move closer, and nothing is
  // said. Returns whether the path started here.
  bool trip(TimePoint at, const ShutdownTimes& times, std::optional<TimePoint> empty_by,
            const std::string& headline) noexcept;

  // The main process ended (`how`: "exit 3", "killed by SIGTERM"). While running, what it left
  // behind is drained: SIGTERM now, SIGKILL after `kill_after`; during the grace, SIGTERM now.
  void main_exited(TimePoint at, const std::string& how, Nanos kill_after,
                   std::optional<TimePoint> empty_by) noexcept;

  // How long the main process has to exit by itself once the checkpoint is written (--exit-window,
  // default 5 s): its last lines (wandb.finish()) are not cut off. Never past the grace's end, so
  // the reserve still holds; 0: SIGTERM at once.
  void set_exit_window(Nanos window) { exit_window_ = window; }

  // The job wrote its checkpoint ($SPENDCAP_CHECKPOINT_DONE appeared): the grace ends after the
  // exit window (the main process exiting ends it sooner). Returns false outside the grace.
  bool checkpoint_done() noexcept;

  // A second signal to spendcap: one step ahead (grace -> SIGTERM, SIGTERM -> SIGKILL).
  void skip_ahead() noexcept;

  // SIGKILL now, repeated until done() (the guard died and left the tree to spendcap).
  void kill_now() noexcept;

  // The armed moment came.
  void on_timer() noexcept;

  // The reaper found the tree empty: nothing more to do.
  void done() noexcept;

 private:
  void terminate() noexcept;
  void send_term() noexcept;
  void kill() noexcept;

  ProcessTree* tree_;
  KillPathTimer& timer_;
  int checkpoint_signal_;
  Say say_;
  KillPhase phase_ = KillPhase::running;
  KillDeadlines deadlines_{};
  Nanos kill_after_{};  // of the kill path under way
  int checkpoint_signalled_ = 0;
  bool grace_skipped_ = false;
  Nanos exit_window_ = kDefaultExitWindow;
  bool checkpoint_written_ = false;
  std::optional<TimePoint> checkpoint_written_at_;
};

}  // namespace spendcap
