#include "spendcap/supervise/job_control.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "spendcap/spend/meter.hpp"
#include "spendcap/spend/trip.hpp"
#include "spendcap/supervise/reporter.hpp"

namespace spendcap {

namespace {

constexpr long kWakerPollNs = 5'000'000;
constexpr int kWakerPolls = 400;  // 2 s: a spendcap that never stops (no job control) still wakes

// Whether /proc/PID/stat says the process is stopped (state T): open, read and close only, so
// that the waker, forked from a process with threads, may call it. The state follows the
// command's name, in parentheses, which may itself hold ')': the last ')' ends it.
bool process_stopped(const char* stat_path) {
  int fd = ::open(stat_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buffer[512];
  ssize_t got = ::read(fd, buffer, sizeof buffer - 1);
  ::close(fd);
  if (got <= 0) return false;
  const char* close_paren = nullptr;
  for (ssize_t i = 0; i < got; ++i) {
    if (buffer[i] == ')') close_paren = buffer + i;
  }
  return close_paren != nullptr && close_paren + 2 < buffer + got && close_paren[2] == 'T';
}

class StdinTerminal final : public Terminal {
 public:
  pid_t job_group() override {
    pid_t foreground = ::tcgetpgrp(STDIN_FILENO);
    return foreground > 0 && foreground != ::getpgrp() ? foreground : -1;
  }

  bool spendcap_in_foreground() override { return ::tcgetpgrp(STDIN_FILENO) == ::getpgrp(); }

  // SIGTTOU: spendcap's group is not in the foreground when it gives the terminal back.
  void give_to(pid_t group) override {
    if (group < 0) {
      sighandler_t previous = ::signal(SIGTTOU, SIG_IGN);
      ::tcsetpgrp(STDIN_FILENO, ::getpgrp());
      ::signal(SIGTTOU, previous);
      return;
    }
    ::tcsetpgrp(STDIN_FILENO, group);  // SIGTTOU is ignored while the job runs
  }

  void stop_self() override {
    struct sigaction stop {};
    stop.sa_handler = SIG_DFL;
    sigemptyset(&stop.sa_mask);
    struct sigaction asio_handler {};
    ::sigaction(SIGTSTP, &stop, &asio_handler);
    ::raise(SIGTSTP);  // returns once continued: by the shell (fg, bg) or by the waker
    ::sigaction(SIGTSTP, &asio_handler, nullptr);
  }

  // Forked from a process with threads: the child makes only async-signal-safe calls.
  // PDEATHSIG: it never outlives spendcap.
  //
  // A SIGCONT that comes before spendcap has stopped is lost (the stop discards it), and the
  // waker is due at once when the trip is less than a heartbeat away: so it continues spendcap
  // once /proc says spendcap is stopped, looking again every kWakerPollNs until then (at most
  // kWakerPolls times). It is collected (killed) when spendcap runs again by fg or bg first.
  void start_waker(TimePoint at) override {
    pid_t parent = ::getpid();
    timespec until{};
    std::int64_t ns = to_ns(at);
    until.tv_sec = ns / 1000000000;
    until.tv_nsec = ns % 1000000000;
    std::string stat_path = "/proc/" + std::to_string(parent) + "/stat";  // formatted before fork
    pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      ::close_range(3, ~0U, 0);  // the guard's control pipe must see EOF when spendcap dies
      while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr) == EINTR) {
      }
      // Not stopped yet (or /proc unreadable): look again, for at most kWakerPolls.
      for (int polls = 0; polls < kWakerPolls && !process_stopped(stat_path.c_str()); ++polls) {
        timespec poll{0, kWakerPollNs};
        ::nanosleep(&poll, nullptr);
      }
      ::kill(parent, SIGCONT);
      ::_exit(0);
    }
    if (pid > 0) {
      waker_pid_ = pid;
      wake_at_ = at;
    }
  }

  // It exited after its SIGCONT, or its moment has passed.
  bool collect_waker() override {
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

  bool reaped(pid_t pid, int wait_status) override {
    if (pid != waker_pid_ || pid <= 0) return false;
    waker_pid_ = -1;
    waker_fired_ = WIFEXITED(wait_status);
    return true;
  }

 private:
  pid_t waker_pid_ = -1;
  bool waker_fired_ = false;
  TimePoint wake_at_{};
};

}  // namespace

std::unique_ptr<Terminal> stdin_terminal() {
  return std::make_unique<StdinTerminal>();
}

JobControl::JobControl(boost::asio::io_context& io, const Reporter& reporter, const Meter& meter,
                       const RunTerms& terms, const JobControlPlan& plan, Nanos sync,
                       Terminal& terminal, Hooks hooks)
    : signals_(io, SIGTSTP, SIGCONT),
      reporter_(reporter),
      meter_(meter),
      terms_(terms),
      plan_(plan),
      sync_(sync),
      terminal_(terminal),
      hooks_(std::move(hooks)) {}

void JobControl::start() {
  pass_on();
}

// Ctrl-Z on spendcap's group (no terminal given to the job) or `kill -TSTP spendcap` pauses the
// job instead of spendcap: the supervisor must keep its clock and its trip.
void JobControl::pass_on() {
  signals_.async_wait([this](auto error, int signal) {
    if (error || finished_) return;
    if (signal == SIGCONT && (paused_ || in_background_)) {
      on_continued();
    } else if (meter_.launched_at()) {
      hooks_.tree().signal_all(signal);
    }
    pass_on();
  });
}

void JobControl::on_finish() {
  finished_ = true;
  signals_.cancel();
}

// Ctrl-Z stopped the job while it had the terminal: say so, arm the waker, stop spendcap.
void JobControl::on_job_stopped() {
  if (!plan_.gave_terminal || !hooks_.running() || paused_ || !meter_.launched_at()) return;
  paused_ = true;
  pid_t job = terminal_.job_group();
  if (job > 0) job_pgrp_ = job;
  std::string line =
      "job paused; still accruing " + format_money(terms_.rate_per_hour, terms_.currency) + "/h";
  std::optional<TimePoint> wake = wake_for_trip();
  if (wake) line += "; the trip stays armed";
  reporter_.line(line + " (fg resumes it)");
  reporter_.flush();  // the line comes before the shell's "Stopped"
  if (wake) terminal_.start_waker(*wake);
  in_background_ = true;
  terminal_.stop_self();
}

// A heartbeat before the budget's trip (the grant may be raised by then), and never later
// than the trip: the moment a stopped spendcap must be running again to enforce it.
std::optional<TimePoint> JobControl::wake_for_trip() const {
  if (terms_.mode != Mode::enforce || terms_.rate_per_hour.micros == 0) return std::nullopt;
  auto at = hooks_.budget_trip();
  if (!at) return std::nullopt;
  return std::max(now(), *at - sync_);
}

// SIGCONT to spendcap while it was paused or left in the background.
void JobControl::on_continued() {
  bool foreground = terminal_.spendcap_in_foreground();
  if (paused_ && terminal_.collect_waker() && !foreground) {
    // Woken for the trip: the job stays paused, spendcap enforces from the background.
    reporter_.line("awake to enforce the trip; the job stays paused (fg resumes it)");
    hooks_.heartbeat_now();
    return;
  }
  if (foreground) {
    in_background_ = false;
    if (job_pgrp_ > 0) terminal_.give_to(job_pgrp_);
  }
  if (paused_) {
    paused_ = false;
    hooks_.tree().signal_all(SIGCONT);
    reporter_.line(std::string("job resumed") + (foreground ? "" : " in the background"));
  }
}

void JobControl::on_trip() {
  if (!paused_) return;
  paused_ = false;
  hooks_.tree().signal_all(SIGCONT);
}

void JobControl::give_back() {
  if (plan_.gave_terminal && !in_background_) terminal_.give_to(-1);
  terminal_.collect_waker();
}

}  // namespace spendcap
