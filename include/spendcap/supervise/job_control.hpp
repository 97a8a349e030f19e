// Job control as a part of the run (run_part.hpp). SIGTSTP and SIGCONT to spendcap are passed on
// to the tree (`kill -TSTP spendcap` pauses the job, and spendcap goes on accruing and enforcing).
//
// On a terminal (the job's group was given the terminal): when Ctrl-Z stops the job, spendcap
// stops itself too (SIGTSTP), so the shell prints "Stopped" and gets its prompt back; `fg` and
// `bg` resume both. Spend goes on while paused (the GPUs are still held), so the trip stays armed:
// a waker process SIGCONTs spendcap a heartbeat before the trip, and spendcap then enforces it in
// the background (the trip SIGCONTs the tree, as the kill path does, so the job can checkpoint).
//
// What this touches outside the event loop (the terminal's foreground group, spendcap's own stop,
// the waker) is behind `Terminal`, so unit tests run it without a terminal. Called from the event
// loop only.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "spendcap/base/duration.hpp"
#include "spendcap/process/process_tree.hpp"
#include "spendcap/supervise/run_part.hpp"
#include "spendcap/supervise/run_terms.hpp"

namespace spendcap {

class Meter;
class Reporter;

struct JobControlPlan {
  bool gave_terminal = false;  // the command's group was made the terminal's foreground
};

// The terminal and spendcap's own process, as job control needs them.
class Terminal {
 public:
  virtual ~Terminal() = default;
  // The terminal's foreground group when it is not spendcap's own (the job's), else -1.
  virtual pid_t job_group() = 0;
  // Whether spendcap's group has the terminal (it was resumed by `fg`).
  virtual bool spendcap_in_foreground() = 0;
  // Makes `group` the terminal's foreground group; spendcap's own group when -1.
  virtual void give_to(pid_t group) = 0;
  // Stops spendcap by SIGTSTP's default action, so the shell reports it as Ctrl-Z would; returns
  // once continued (the shell's fg or bg, or the waker).
  virtual void stop_self() = 0;
  // A child of spendcap (not of the tree) that sleeps until `at`, then SIGCONTs spendcap.
  virtual void start_waker(TimePoint at) = 0;
  // Whether the waker woke spendcap; either way it is gone after.
  virtual bool collect_waker() = 0;
  // The reaper reaped `pid`: true when it was the waker.
  virtual bool reaped(pid_t pid, int wait_status) = 0;
};

// The real terminal (stdin) and a forked waker.
std::unique_ptr<Terminal> stdin_terminal();

class JobControl final : public RunPart {
 public:
  struct Hooks {
    std::function<bool()> running;                          // not tripped, not shutting down
    std::function<ProcessTree&()> tree;                     // the tree as it is now
    std::function<std::optional<TimePoint>()> budget_trip;  // when the budget trips; none: never
    std::function<void()> heartbeat_now;                    // the grant is stale: ask at once
  };

  // `sync`: the heartbeat interval; the waker comes that much before the trip.
  JobControl(boost::asio::io_context& io, const Reporter& reporter, const Meter& meter,
             const RunTerms& terms, const JobControlPlan& plan, Nanos sync, Terminal& terminal,
             Hooks hooks);

  // Starts passing SIGTSTP and SIGCONT on.
  void start();
  void on_launched(TimePoint) override {}
  void on_finish() override;

  // The guard reported the main process stopped (Ctrl-Z, SIGTTIN).
  void on_job_stopped();
  // The run tripped: a paused job is continued, so that it can take its checkpoint.
  void on_trip();
  bool reaped(pid_t pid, int wait_status) { return terminal_.reaped(pid, wait_status); }
  // After the tree is empty: the terminal back to spendcap's group (not from the background: the
  // shell holds the terminal then), and the waker collected.
  void give_back();

 private:
  void pass_on();
  std::optional<TimePoint> wake_for_trip() const;
  void on_continued();

  boost::asio::signal_set signals_;
  const Reporter& reporter_;
  const Meter& meter_;
  const RunTerms& terms_;
  const JobControlPlan& plan_;
  Nanos sync_;
  Terminal& terminal_;
  Hooks hooks_;
  bool finished_ = false;
  bool paused_ = false;         // Ctrl-Z stopped the job and it was not resumed
  bool in_background_ = false;  // spendcap stopped itself and did not get the terminal back
  pid_t job_pgrp_ = -1;         // the job's group, which had the terminal
};

}  // namespace spendcap
