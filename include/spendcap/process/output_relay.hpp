// The output relay: when spendcap's stderr is a pipe (`2>&1 | tee log`, a CI runner's log), the
// job's stderr (and its stdout, when that is the same pipe) becomes a pipe of the relay's, a small
// process forked before the guard that copies what the job writes to the original pipe, and
// writes spendcap's own lines there too. It alone writes to the original, so it knows where the
// job's last line ends: a spendcap line starts with a newline only when the job's last byte was
// not one. The job sees a pipe where it saw a pipe (of the same capacity): nothing changes for it.
//
// The relay copies each read at once (no buffering beyond one read) and serves the job before
// spendcap's lines, so the order is the order of the writes. It ignores the signals the guard
// ignores, so Ctrl-C or a SIGTERM to spendcap's group cannot cut the job's output short; it is not
// spendcap's thread, so a stopped or killed spendcap does not stop the job's output. It ends when
// the job's side is closed by every process of the tree and spendcap's side by spendcap (its
// exit): after the kill path nothing of the tree holds the pipe, so nothing written is lost.
// When the original pipe's reader is gone (EPIPE) the relay exits, and the job's next write
// fails as it would have.
//
// Not used where stderr is a terminal (lines clear the line instead), a regular file (its last
// byte is read back), a socket, or on the privileged runner (its guard is forked earlier).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>

namespace spendcap {

class OutputRelay {
 public:
  // Forks the relay when stderr is a pipe; null otherwise (or when it cannot be made). Call while
  // spendcap has one thread, before the guard is forked.
  static std::unique_ptr<OutputRelay> start();
  ~OutputRelay();
  OutputRelay(const OutputRelay&) = delete;
  OutputRelay& operator=(const OutputRelay&) = delete;

  // Runs `fork_guard` with fds 1 (when it is the relayed pipe) and 2 pointing to the relay's
  // pipe, so that the guard and the job inherit it, then gives spendcap its own back and closes
  // its copy of the job's side.
  template <typename ForkGuard>
  void hand_to_guard(ForkGuard&& fork_guard) {
    give_job_side();
    try {
      fork_guard();
    } catch (...) {
      take_back_own_side();
      throw;
    }
    take_back_own_side();
  }

  // Writes one of spendcap's lines (ending with "\n") through the relay, which puts a newline
  // first when the job's output stopped mid-line. Thread-safe as far as one writer thread goes.
  void send_line(const std::string& line) const;

  // Waits at most `bound` until the job's side is closed and every line sent is written (before
  // spendcap exits, so that what follows spendcap on the pipe comes after the job's output).
  void drain(std::chrono::milliseconds bound) const;

  pid_t pid() const { return pid_; }

 private:
  struct Page;
  OutputRelay() = default;
  void give_job_side();
  void take_back_own_side();

  pid_t pid_ = -1;
  Page* page_ = nullptr;  // shared with the relay
  int lines_fd_ = -1;     // write end of spendcap's lines
  int job_fd_ = -1;       // write end of the job's pipe, until the guard holds it
  bool relay_stdout_ = false;
  int saved_fds_[3] = {-1, -1, -1};
};

}  // namespace spendcap
