#include "spendcap/process/process_state.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "spendcap/base/error.hpp"

namespace spendcap {

namespace {

// <linux/ioprio.h> is not in every libc's headers: the two values used.
constexpr int kIoprioWhoProcess = 1;

const char* const kLimitNames[RLIM_NLIMITS] = {
    "RLIMIT_CPU",      "RLIMIT_FSIZE", "RLIMIT_DATA",   "RLIMIT_STACK",
    "RLIMIT_CORE",     "RLIMIT_RSS",   "RLIMIT_NPROC",  "RLIMIT_NOFILE",
    "RLIMIT_MEMLOCK",  "RLIMIT_AS",    "RLIMIT_LOCKS",  "RLIMIT_SIGPENDING",
    "RLIMIT_MSGQUEUE", "RLIMIT_NICE",  "RLIMIT_RTPRIO", "RLIMIT_RTTIME"};

[[noreturn]] void refuse(const std::string& step) {
  throw Error("privileged runner", "cannot reset " + step + ": " + errno_text(errno),
              "the runner resets the caller's limits and signals before its privileged steps");
}

rlim_t smaller(rlim_t a, rlim_t b) {
  if (a == RLIM_INFINITY) return b;
  if (b == RLIM_INFINITY) return a;
  return a < b ? a : b;
}

rlim_t larger(rlim_t a, rlim_t b) {
  if (a == RLIM_INFINITY || b == RLIM_INFINITY) return RLIM_INFINITY;
  return a > b ? a : b;
}

}  // namespace

ProcessState ProcessState::capture() noexcept {
  ProcessState state;
  state.captured = true;
  for (int resource = 0; resource < RLIM_NLIMITS; ++resource) {
    if (::getrlimit(static_cast<__rlimit_resource>(resource), &state.limits[resource]) != 0) {
      state.limits[resource] = runner_limit(resource);
    }
  }
  state.umask = ::umask(022);
  ::umask(state.umask);
  errno = 0;
  int nice = ::getpriority(PRIO_PROCESS, 0);
  state.nice = errno ? 0 : nice;
  int policy = ::sched_getscheduler(0);
  state.sched_policy = policy < 0 ? SCHED_OTHER : policy & ~SCHED_RESET_ON_FORK;
  ::sched_getparam(0, &state.sched);
  long io = ::syscall(SYS_ioprio_get, kIoprioWhoProcess, 0);
  state.io_priority = io < 0 ? 0 : static_cast<int>(io);
  state.have_affinity = ::sched_getaffinity(0, sizeof state.affinity, &state.affinity) == 0;
  long slack = ::prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
  state.timer_slack_ns = slack < 0 ? 0 : slack;
  return state;
}

rlimit runner_limit(int resource) noexcept {
  switch (resource) {
    case RLIMIT_CORE:
      return {0, 0};
    case RLIMIT_STACK:
      return {rlim_t{8} << 20, RLIM_INFINITY};
    case RLIMIT_NOFILE:
      return {65536, 65536};
    case RLIMIT_MEMLOCK:
      return {rlim_t{64} << 20, rlim_t{64} << 20};
    case RLIMIT_NICE:
    case RLIMIT_RTPRIO:
      return {0, 0};
    default:  // CPU, FSIZE, DATA, RSS, NPROC, AS, LOCKS, SIGPENDING, MSGQUEUE, RTTIME
      return {RLIM_INFINITY, RLIM_INFINITY};
  }
}

rlim_t runner_floor(int resource) noexcept {
  switch (resource) {
    case RLIMIT_CPU:
    case RLIMIT_FSIZE:  // a ledger write past it fails (EFBIG) or kills (SIGXFSZ)
      return RLIM_INFINITY;
    case RLIMIT_DATA:
    case RLIMIT_AS:  // libcurl's and the threads' mappings
      return rlim_t{4} << 30;
    case RLIMIT_STACK:
      return rlim_t{2} << 20;
    case RLIMIT_NOFILE:
    case RLIMIT_LOCKS:
      return 1024;
    case RLIMIT_NPROC:  // the service user's threads, every run's together
      return 4096;
    case RLIMIT_SIGPENDING:
      return 64;
    default:  // CORE, RSS, MEMLOCK, MSGQUEUE, NICE, RTPRIO, RTTIME: not used by the runner
      return 0;
  }
}

int reset_process_state() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF && ::open("/dev/null", O_RDWR) != fd) {
      refuse("fd " + std::to_string(fd) + " (opening /dev/null)");
    }
  }
  for (int resource = 0; resource < RLIM_NLIMITS; ++resource) {
    rlimit now{}, want = runner_limit(resource);
    auto which = static_cast<__rlimit_resource>(resource);
    if (::getrlimit(which, &now) != 0) refuse(kLimitNames[resource]);
    if (resource != RLIMIT_CORE) {
      want.rlim_max = larger(want.rlim_max, now.rlim_max);
      want.rlim_cur = larger(want.rlim_cur, now.rlim_cur);
    }
    if (::setrlimit(which, &want) == 0) continue;
    if (errno != EPERM) refuse(kLimitNames[resource]);
    // No CAP_SYS_RESOURCE (root in a container that dropped it, RLIMIT_NOFILE past nr_open): the
    // hard limit stays as the caller left it, the soft one goes up to it, and a hard limit the
    // runner's steps cannot live with refuses the run.
    rlimit fallback{smaller(want.rlim_cur, now.rlim_max), now.rlim_max};
    if (::setrlimit(which, &fallback) != 0) refuse(kLimitNames[resource]);
    if (fallback.rlim_cur != RLIM_INFINITY &&
        (runner_floor(resource) == RLIM_INFINITY || fallback.rlim_cur < runner_floor(resource))) {
      throw Error(
          "privileged runner",
          std::string("the hard ") + kLimitNames[resource] + " is " +
              std::to_string(fallback.rlim_cur) + ", below what the runner needs (" +
              (runner_floor(resource) == RLIM_INFINITY ? std::string("unlimited")
                                                       : std::to_string(runner_floor(resource))) +
              "), and it cannot raise it here (no CAP_SYS_RESOURCE)",
          "lower only the soft limit (ulimit -S), which the job still gets");
    }
  }
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  for (int signal = 1; signal < NSIG; ++signal) {
    if (signal == SIGKILL || signal == SIGSTOP) continue;
    // 32 and 33 are glibc's own (EINVAL): nothing to reset there.
    if (::sigaction(signal, &default_action, nullptr) != 0 && errno != EINVAL) {
      refuse("the disposition of signal " + std::to_string(signal));
    }
  }
  sigset_t none;
  sigemptyset(&none);
  if (::sigprocmask(SIG_SETMASK, &none, nullptr) != 0) refuse("the signal mask");
  ::umask(022);
  if (::setpriority(PRIO_PROCESS, 0, 0) != 0) refuse("the nice value");
  sched_param param{};
  if (::sched_setscheduler(0, SCHED_OTHER, &param) != 0) refuse("the scheduling policy");
  if (::syscall(SYS_ioprio_set, kIoprioWhoProcess, 0, 0) != 0) refuse("the I/O priority");
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) CPU_SET(cpu, &all);
  // The kernel keeps the CPUs the cgroup's cpuset allows (Slurm's, a container's).
  if (::sched_setaffinity(0, sizeof all, &all) != 0) refuse("the CPU affinity");
  if (::prctl(PR_SET_TIMERSLACK, 0, 0, 0, 0) != 0) refuse("the timer slack");
  int cwd = ::open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (::chdir("/") != 0) refuse("the working directory");
  return cwd;
}

void restore_process_state(const ProcessState& state) noexcept {
  if (!state.captured) return;
  if (state.have_affinity) ::sched_setaffinity(0, sizeof state.affinity, &state.affinity);
  ::syscall(SYS_ioprio_set, kIoprioWhoProcess, 0, state.io_priority);
  ::sched_setscheduler(0, state.sched_policy, &state.sched);
  ::setpriority(PRIO_PROCESS, 0, state.nice);
  ::prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(state.timer_slack_ns), 0, 0, 0);
  ::umask(state.umask);
  // Last: a low RLIMIT_NOFILE or RLIMIT_FSIZE must not fail the steps above.
  for (int resource = 0; resource < RLIM_NLIMITS; ++resource) {
    ::setrlimit(static_cast<__rlimit_resource>(resource), &state.limits[resource]);
  }
}

}  // namespace spendcap
