// What spendcap prints while a job runs. The job owns the terminal: spendcap prints milestone lines
// only (start, thresholds, trip, end) on stderr, each in one write(2) so it never interleaves
// inside the job's own output; on a terminal each line first clears the current line ("\r\e[K"),
// as tqdm.write does, so a progress bar is redrawn below instead of garbled. Live figures go to the
// terminal title with --title (pushed and popped with the xterm title stack), never to a
// refreshing line. --quiet prints errors only.
//
// Off a terminal every line starts at the beginning of a line, so that `grep '^spendcap:'` finds
// it after a progress bar's "\r" updates: when stderr is a regular file, its byte before the write
// position is read (pread) and a newline is written first when that byte is not one. A pipe (or
// anything else that cannot be read back) gets a newline first unless spendcap knows the job wrote
// nothing since spendcap's own last line there (or since the job's tree began, for the start
// line): the kernel's count of bytes the job's processes wrote (write_count_of_tree, from
// /proc/PID/io) is unchanged. Where it cannot be read (the job runs as another user on a shared
// runner) or anything was written (to any file: a progress line counts too), the newline comes
// first, as before. The count is read just before and after the line's write(2): a job that
// writes within those microseconds can still meet the line mid-way, as it could without spendcap.
// Where the job's stderr is relayed (process/output_relay.hpp: stderr is a pipe), the lines go
// through the relay instead, which knows where the job's last line ended.
// --log FILE sends the lines to FILE instead (appended; errors go to stderr as well).
//
// Once the job runs, lines are written by a thread of their own (write_in_background): stderr may
// be a pipe that nobody reads, and a write that blocks must never stall the event loop that
// enforces the budget. A full queue drops lines; at exit what is queued gets a bounded wait.
#pragma once

#include <atomic>

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace spendcap {

class OutputRelay;

class Reporter {
 public:
  Reporter(bool quiet, bool title);
  // --log: the lines go to `log_fd` (owned, closed by the destructor) instead of stderr.
  Reporter(bool quiet, bool title, int log_fd);
  ~Reporter();  // waits at most 200 ms for queued lines

  // "spendcap: TEXT" unless quiet.
  void line(const std::string& text) const;
  // "spendcap: TEXT", always.
  void error(const std::string& text) const;
  // The terminal title, when --title was given and stderr is a terminal.
  void title(const std::string& text);
  bool title_enabled() const { return title_ && tty_ && !quiet_; }

  // Waits at most 200 ms for the queued lines to be written (before re-raising a signal, which
  // skips destructors).
  void flush() const;

  // From now on writes happen on a writer thread. Call only after the guard is forked (the guard
  // must be forked while spendcap has one thread).
  void write_in_background();

  // Bytes written so far by the job's processes, or none when it cannot be known; used to decide
  // whether a line on a pipe must start with a newline. Set before write_in_background().
  void set_job_write_count(std::function<std::optional<std::uint64_t>()> count);
  // From now on lines for stderr go through `relay` (which outlives the Reporter).
  void relay_lines_to(const OutputRelay* relay) { relay_ = relay; }
  // The guard has exited and is not reaped yet: the count is read once more and kept from now on
  // (the tree is gone; reaped, the guard's counts would merge into spendcap's own).
  void freeze_job_write_count();

 private:
  struct Queue;
  struct Line;
  struct CleanMark;
  void write(std::string text) const;
  void write_line(const std::string& text, bool error) const;
  void enqueue(Line line) const;
  static void write_line_now(const Line& line);

  bool quiet_;
  bool title_;
  bool tty_;
  bool title_pushed_ = false;
  int log_fd_ = -1;
  std::shared_ptr<Queue> queue_;      // null until write_in_background()
  std::shared_ptr<CleanMark> clean_;  // null until set_job_write_count()
  const OutputRelay* relay_ = nullptr;
};

// What the processes under `guard` (the tree guard: the job, its descendants, and every child it
// reaped) have written, by the kernel's I/O accounting, the guard's own writes (its event pipe)
// left out. None when a /proc/PID/io cannot be read (another user's process).
// `reaped_written`: the guard's published count of its reaped children's writes, used where its
// /proc/GUARD/io cannot be read (an ordinary user's non-dumpable guard).
std::optional<std::uint64_t> write_count_of_tree(
    pid_t guard, const std::atomic<std::uint64_t>* reaped_written = nullptr);

}  // namespace spendcap
