// What spendcap prints while a job runs. The job owns the terminal: spendcap prints milestone lines
// only (start, thresholds, trip, end) on stderr, each in one write(2) so it never interleaves
// inside the job's own output; on a terminal each line first clears the current line ("\r\e[K"),
// as tqdm.write does, so a progress bar is redrawn below instead of garbled. Live figures go to the
// terminal title with --title (pushed and popped with the xterm title stack), never to a
// refreshing line. --quiet prints errors only.
//
// Off a terminal every line starts at the beginning of a line, so that `grep '^spendcap:'` finds
// it after a progress bar's "\r" updates: when stderr is a regular file, its byte before the write
// position is read (pread) and a newline is written first when that byte is not one; on a pipe (or
// anything else that cannot be read back) a newline always comes first once the job runs, since
// the job may have written half a line. --log FILE sends the lines to FILE instead (appended;
// errors go to stderr as well).
//
// Once the job runs, lines are written by a thread of their own (write_in_background): stderr may
// be a pipe that nobody reads, and a write that blocks must never stall the event loop that
// enforces the budget. A full queue drops lines; at exit what is queued gets a bounded wait.
#pragma once

#include <memory>
#include <string>

namespace spendcap {

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

 private:
  struct Queue;
  struct Line;
  void write(std::string text) const;
  void write_line(const std::string& text, bool error) const;
  void enqueue(Line line) const;
  static void write_line_now(const Line& line);

  bool quiet_;
  bool title_;
  bool tty_;
  bool title_pushed_ = false;
  int log_fd_ = -1;
  std::shared_ptr<Queue> queue_;  // null until write_in_background()
};

}  // namespace spendcap
