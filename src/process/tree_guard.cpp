#include "spendcap/process/tree_guard.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/capability.h>
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <optional>

#include "spendcap/base/error.hpp"
#include "spendcap/process/cgroup.hpp"
#include "spendcap/process/credentials.hpp"
#include "spendcap/process/escalation.hpp"
#include "spendcap/process/pid_namespace.hpp"
#include "spendcap/process/process_tree.hpp"
#include "spendcap/process/watchdog.hpp"

namespace spendcap {

namespace {

int count_threads() {
  int threads = 0;
  if (DIR* dir = ::opendir("/proc/self/task")) {
    while (dirent* entry = ::readdir(dir)) threads += entry->d_name[0] != '.';
    ::closedir(dir);
  }
  return threads;
}

// Closes every fd but `keep` (sorted): the guard must not hold the supervisor's ledger connection,
// sockets or pipes, whose other ends would otherwise never see EOF.
void close_all_but(std::vector<int> keep) {
  std::sort(keep.begin(), keep.end());
  unsigned int next = 0;
  for (int fd : keep) {
    if (static_cast<unsigned int>(fd) > next) ::close_range(next, fd - 1, 0);
    next = fd + 1;
  }
  ::close_range(next, UINT_MAX, 0);
}

void send(int fd, GuardEventKind kind, pid_t pid, int value, bool tree_empty) {
  GuardEvent event{kind, pid, value, tree_empty ? 1 : 0, to_ns(now())};
  while (::write(fd, &event, sizeof event) < 0 && errno == EINTR) {
  }
  // EPIPE: the supervisor is gone; the control pipe's EOF handles that.
}

// For news the run does without (orphans' exits): sent only when the pipe has room, so that a
// stopped supervisor and a flood of orphans never block the guard, the tree's watchdog. The guard
// is the pipe's one writer, and a record is under PIPE_BUF: POLLOUT means the write fits whole.
void send_if_room(int fd, GuardEventKind kind, pid_t pid, int value) {
  pollfd out{fd, POLLOUT, 0};
  if (::poll(&out, 1, 0) == 1 && (out.revents & POLLOUT)) send(fd, kind, pid, value, false);
}

// What the dead supervisor would have removed once the tree was empty.
void remove_run_files(const GuardOptions& options, const Cgroup* cgroup) {
  if (!options.run_dir.empty()) {
    ::unlink(checkpoint_done_path(options.run_dir).c_str());
    ::rmdir(options.run_dir.c_str());
  }
  if (cgroup) cgroup->remove();
}

// What one reaping pass found.
struct Reaped {
  bool main_exited = false;  // the main process was reaped, with main_status
  int main_status = 0;
  bool tree_empty = false;  // nothing is left to reap: the tree is gone
};

// The page the guard publishes its reaped children's write count in (GuardHandle::reaped_written),
// mapped before the guard is forked; none when it could not be mapped.
std::atomic<std::uint64_t>* reaped_page = nullptr;

std::atomic<std::uint64_t>* map_reaped_page() {
  void* page = ::mmap(nullptr, sizeof(std::atomic<std::uint64_t>), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) return nullptr;
  return new (page) std::atomic<std::uint64_t>(kNotPublished);
}

std::optional<std::uint64_t> wchar_in(const std::string& text) {
  auto at = text.find("wchar:");
  if (at == std::string::npos) return std::nullopt;
  return std::strtoull(text.c_str() + at + 6, nullptr, 10);
}

// /proc/self/io or a thread's: through the fd opened while the guard was dumpable, else the path.
std::optional<std::uint64_t> own_wchar(int fd, const std::string& io_path) {
  if (fd >= 0) {
    char buffer[512];
    ssize_t n = ::pread(fd, buffer, sizeof buffer - 1, 0);
    if (n <= 0) return std::nullopt;
    return wchar_in(std::string(buffer, static_cast<size_t>(n)));
  }
  std::ifstream in(io_path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return wchar_in(text);
}

// In the guard: its whole count (reaped children's included) less its own threads' (its event
// pipe), as the supervisor's write_count_of_tree reads it through /proc where it may.
void publish_reaped_writes() {
  if (!reaped_page) return;
  std::optional<std::uint64_t> whole = own_wchar(guard_own_io_fd, "/proc/self/io");
  if (!whole) return;
  std::uint64_t own = 0;
  if (guard_thread_io_fd >= 0) {
    // Not dumpable: the guard is one thread (forked before any), read through its fd.
    std::optional<std::uint64_t> thread = own_wchar(guard_thread_io_fd, "");
    if (!thread) return;
    own = *thread;
  } else if (DIR* dir = ::opendir("/proc/self/task")) {
    while (dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] == '.') continue;
      std::optional<std::uint64_t> thread =
          own_wchar(-1, std::string("/proc/self/task/") + entry->d_name + "/io");
      if (!thread) {
        ::closedir(dir);
        return;
      }
      own += *thread;
    }
    ::closedir(dir);
  }
  reaped_page->store(*whole >= own ? *whole - own : 0, std::memory_order_release);
}

// The one reaper (tini's reap_zombies): reaps everything that died in the tree, orphans included,
// without blocking. A stopped main process is not reaped but told, so that spendcap can stop with
// it on a terminal (job control); an orphan's exit is told only when the pipe has room.
Reaped reap_children(pid_t main_pid, int events_fd) {
  Reaped reaped;
  while (true) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG | WUNTRACED);
    if (pid > 0 && WIFSTOPPED(status)) {
      if (pid == main_pid) send(events_fd, GuardEventKind::main_stopped, pid, 0, false);
      continue;
    }
    if (pid > 0) {
      publish_reaped_writes();  // before the exit is told: its count is the guard's now
      if (pid == main_pid) {
        reaped.main_exited = true;
        reaped.main_status = status;
      } else {
        // An orphan: the guard alone knows how it ended.
        send_if_room(events_fd, GuardEventKind::orphan_exited, pid, status);
      }
      continue;
    }
    if (pid < 0 && errno == EINTR) continue;
    reaped.tree_empty = pid < 0 && errno == ECHILD;
    return reaped;
  }
}

// Reads the orders waiting on the control pipe into the watchdog. Returns false when the
// supervisor is gone (EOF or a broken pipe: SIGKILLed, crashed); the watchdog has been told.
bool read_orders(int control_fd, Watchdog& watchdog, bool* launch = nullptr) {
  // Every write is one 16-byte record and a pipe never splits one, so reads are whole records.
  GuardOrder orders[16];
  ssize_t n = ::read(control_fd, orders, sizeof orders);
  if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
    // Nothing may outlive the supervisor.
    watchdog.supervisor_gone(now());
    return false;
  }
  for (ssize_t i = 0; n > 0 && i < n / static_cast<ssize_t>(sizeof(GuardOrder)); ++i) {
    watchdog.heard(now());
    if (orders[i].kind == GuardOrderKind::launch && launch) *launch = true;
    if (orders[i].kind == GuardOrderKind::deadline) {
      watchdog.set_deadline(orders[i].value ? std::optional(from_ns(orders[i].value))
                                            : std::nullopt);
    }
  }
  return true;
}

// poll's timeout until `wake`: -1 (no timeout) without one, rounded up so that the step after the
// wake finds it due.
int poll_timeout(std::optional<TimePoint> wake) {
  if (!wake) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*wake - now()).count();
  return static_cast<int>(std::clamp<long long>(left + 1, 0, INT_MAX));
}

[[noreturn]] void guard_main(const LaunchSpec& spec, const Cgroup* cgroup,
                             const GuardOptions& options, int control_fd, int events_fd,
                             const std::vector<int>& own_fds = {}) {
  std::vector<int> keep = spec.inherited.fds;
  keep.insert(keep.end(), {0, 1, 2, control_fd, events_fd});
  keep.insert(keep.end(), own_fds.begin(), own_fds.end());
  for (int fd : {guard_own_io_fd, guard_thread_io_fd}) {
    if (fd >= 0) keep.push_back(fd);
  }
  close_all_but(keep);
  if (options.subreaper) ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  for (int signal : kGuardIgnoredSignals) ::signal(signal, SIG_IGN);

  // SIGCHLD is blocked before the launch, so no exit is missed: it waits on the signalfd.
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &chld, nullptr);
  int signal_fd = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd < 0) {
    // Without it the guard would never hear of an exit: refuse to launch rather than lose one.
    send(events_fd, GuardEventKind::launch_failed, -1, errno, false);
    send(events_fd, GuardEventKind::tree_empty, -1, 0, true);
    ::_exit(EXIT_FAILURE);
  }

  // The launch waits for the supervisor's order: its threads are running by then, so a job that
  // exhausts RLIMIT_NPROC cannot keep them from starting (the control pipe is blocking here).
  // Gone before it: nothing was launched, nothing is left to clean up.
  Watchdog watchdog(options.stale_after, options.orphan_kill_after, now());
  for (bool launch = false; !launch;) {
    if (!read_orders(control_fd, watchdog, &launch)) ::_exit(EXIT_SUCCESS);
  }
  publish_reaped_writes();  // nothing reaped yet: the job's count starts at what it writes
  Launched launched = launch_command(spec);
  if (launched.pid <= 0) {
    send(events_fd, GuardEventKind::launch_failed, -1,
         launched.exec_errno ? launched.exec_errno : EAGAIN, false);
    send(events_fd, GuardEventKind::tree_empty, -1, 0, true);
    ::_exit(EXIT_SUCCESS);
  }
  send(events_fd, GuardEventKind::launched, launched.pid, 0, false);
  // The runner's guard: CAP_SETUID and CAP_SETGID were for the launch only. Fails closed.
  if (spec.run_as && !lower_capabilities(cap_bit(CAP_KILL))) ::kill(launched.pid, SIGKILL);
  if (launched.exec_errno) {
    send(events_fd, GuardEventKind::launch_failed, launched.pid, launched.exec_errno, false);
  }

  LiveProcessTree tree(::getpid(), cgroup);
  watchdog.heard(now());
  bool orphaned = false;  // the control pipe is at EOF
  while (true) {
    Reaped reaped = reap_children(launched.pid, events_fd);
    if (reaped.main_exited) {
      send(events_fd, GuardEventKind::main_exited, launched.pid, reaped.main_status,
           reaped.tree_empty);
    }
    if (reaped.tree_empty) {
      send(events_fd, GuardEventKind::tree_empty, -1, 0, true);
      if (orphaned) remove_run_files(options, cgroup);
      ::_exit(EXIT_SUCCESS);
    }

    WatchdogStep step = watchdog.step(now());
    if (step.terminate) terminate_tree(tree);
    if (step.kill) kill_tree(tree);

    pollfd fds[2] = {{signal_fd, POLLIN, 0}, {control_fd, POLLIN, 0}};
    int ready = ::poll(fds, orphaned ? 1 : 2, poll_timeout(step.wake));
    if (ready < 0 && errno != EINTR) ::_exit(EXIT_FAILURE);
    if (fds[0].revents) {
      signalfd_siginfo info;
      while (::read(signal_fd, &info, sizeof info) > 0) {
      }
    }
    if (!orphaned && fds[1].revents) orphaned = !read_orders(control_fd, watchdog);
  }
}

// ---- the privileged runner's guard, forked early ----

// The one guard prefork_guard made, until start_guard hands it its spec.
struct Preforked {
  bool active = false;
  pid_t pid = -1;
  int spec_fd = -1;
  int events_fd = -1;
  int control_fd = -1;
};
Preforked preforked;

// The spec as length-prefixed fields: what the supervisor decides (command, environment,
// terminal, timings, run directory), nothing the guard takes on trust beyond running it as the
// caller.
constexpr size_t kMaxSpecBytes = size_t{64} << 20;

void put(std::string& out, const std::string& field) {
  auto size = static_cast<std::uint32_t>(field.size());
  out.append(reinterpret_cast<const char*>(&size), sizeof size);
  out += field;
}

std::string encode_spec(const LaunchSpec& spec, const GuardOptions& options) {
  std::string out;
  put(out, spec.executable);
  put(out, spec.take_terminal ? "1" : "0");
  put(out, options.subreaper ? "1" : "0");
  put(out, std::to_string(options.stale_after.count()));
  put(out, std::to_string(options.orphan_kill_after.count()));
  put(out, options.run_dir);
  put(out, std::to_string(spec.argv.size()));
  for (const std::string& arg : spec.argv) put(out, arg);
  put(out, std::to_string(spec.env.size()));
  for (const std::string& entry : spec.env) put(out, entry);
  return out;
}

struct Reader {
  const std::string& in;
  size_t at = 0;
  bool ok = true;
  std::string next() {
    std::uint32_t size = 0;
    if (!ok || in.size() - at < sizeof size) return ok = false, std::string();
    std::memcpy(&size, in.data() + at, sizeof size);
    at += sizeof size;
    if (in.size() - at < size) return ok = false, std::string();
    std::string field = in.substr(at, size);
    at += size;
    return field;
  }
  long long number() {
    std::string text = next();
    char* end = nullptr;
    long long value = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || value < 0) ok = false;
    return value;
  }
};

bool decode_spec(const std::string& in, LaunchSpec* spec, GuardOptions* options) {
  Reader r{in};
  spec->executable = r.next();
  spec->take_terminal = r.next() == "1";
  options->subreaper = r.next() == "1";
  options->stale_after = Nanos(r.number());
  options->orphan_kill_after = Nanos(r.number());
  options->run_dir = r.next();
  long long argc = r.number();
  for (long long i = 0; r.ok && i < argc; ++i) spec->argv.push_back(r.next());
  long long envc = r.number();
  for (long long i = 0; r.ok && i < envc; ++i) spec->env.push_back(r.next());
  return r.ok && r.at == in.size() && !spec->argv.empty() && !spec->executable.empty();
}

bool read_all(int fd, std::string* out) {
  char buffer[65536];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return true;
    out->append(buffer, static_cast<size_t>(n));
    if (out->size() > kMaxSpecBytes) return false;
  }
}

[[noreturn]] void preforked_guard_main(const PreforkedGuard& setup, int spec_fd, int control_fd,
                                       int events_fd) {
  try {
    switch_to_service(setup.caller, setup.service_uid, setup.service_gid,
                      cap_bit(CAP_KILL) | cap_bit(CAP_SETUID) | cap_bit(CAP_SETGID));
  } catch (...) {
    ::_exit(to_int(ExitCode::internal));
  }
  std::string message;
  // EOF before any byte: the supervisor ended the run before its launch (refused, failed).
  if (!read_all(spec_fd, &message) || message.empty()) ::_exit(0);
  ::close(spec_fd);
  LaunchSpec spec;
  GuardOptions options;
  if (!decode_spec(message, &spec, &options)) ::_exit(to_int(ExitCode::internal));
  spec.inherited = setup.inherited;
  spec.cgroup_dir = setup.cgroup_dir;
  spec.cgroup_procs_fd = setup.cgroup_procs_fd;
  spec.run_as = &setup.caller;
  Cgroup cgroup(setup.cgroup_dir, setup.cgroup_kill_fd);
  guard_main(spec, &cgroup, options, control_fd, events_fd,
             {setup.cgroup_procs_fd, setup.cgroup_kill_fd});
}

}  // namespace

PreforkedEnds prefork_guard(const PreforkedGuard& setup) {
  if (int threads = count_threads(); threads > 1) {
    throw Error("guard", "the runner already runs " + std::to_string(threads) + " threads",
                "the guard must be forked before any thread starts (a bug in spendcap)");
  }
  int spec[2], control[2], events[2];
  if (::pipe2(spec, O_CLOEXEC) != 0 || ::pipe2(control, O_CLOEXEC) != 0 ||
      ::pipe2(events, O_CLOEXEC) != 0) {
    throw Error("guard", "pipe: " + errno_text(errno));
  }
  std::string why_not;
  reaped_page = map_reaped_page();
  pid_t pid = fork_into_pid_namespace(&why_not);
  if (pid < 0) {
    throw Error("privileged runner", "cannot make the run's PID namespace: " + why_not,
                "the runner must be setuid root (scripts/install-shared-runner.sh)");
  }
  if (pid == 0) {
    ::close(spec[1]);
    ::close(control[1]);
    ::close(events[0]);
    preforked_guard_main(setup, spec[0], control[0], events[1]);
  }
  ::close(spec[0]);
  ::close(control[0]);
  ::close(events[1]);
  preforked = Preforked{true, pid, spec[1], events[0], control[1]};
  return PreforkedEnds{pid, spec[1], events[0], control[1]};
}

void adopt_preforked_guard(pid_t pid, int spec_fd, int events_fd, int control_fd) {
  for (int fd : {spec_fd, events_fd, control_fd}) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  preforked = Preforked{true, pid, spec_fd, events_fd, control_fd};
}

GuardHandle start_guard(const LaunchSpec& spec, const Cgroup* cgroup, const GuardOptions& options) {
  if (int threads = count_threads(); threads > 1) {
    throw Error("guard", "spendcap already runs " + std::to_string(threads) + " threads",
                "the guard must be forked before any thread starts (a bug in spendcap)");
  }
  if (preforked.active) {
    preforked.active = false;
    std::string message = encode_spec(spec, options);
    for (size_t at = 0; at < message.size();) {
      ssize_t n = ::write(preforked.spec_fd, message.data() + at, message.size() - at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        throw Error("guard", "the runner's guard is gone: " + errno_text(errno),
                    "see the runner's install (scripts/install-shared-runner.sh)");
      }
      at += static_cast<size_t>(n);
    }
    ::close(preforked.spec_fd);
    GuardHandle handle;
    handle.pid = preforked.pid;
    handle.isolated = true;
    handle.events_fd = preforked.events_fd;
    handle.control_fd = preforked.control_fd;
    handle.reaped_written = reaped_page;
    ::fcntl(handle.events_fd, F_SETFL, O_NONBLOCK);
    ::fcntl(handle.control_fd, F_SETFL, O_NONBLOCK);
    return handle;
  }
  int control[2], events[2];
  if (::pipe2(control, O_CLOEXEC) != 0) throw Error("guard", "pipe: " + errno_text(errno));
  if (::pipe2(events, O_CLOEXEC) != 0) throw Error("guard", "pipe: " + errno_text(errno));
  GuardHandle handle;
  reaped_page = map_reaped_page();
  handle.reaped_written = reaped_page;
  pid_t pid = -1;
  if (options.pid_namespace) {
    pid = fork_into_pid_namespace(&handle.why_not_isolated);
    handle.isolated = pid >= 0;
    if (pid < 0 && options.pid_namespace_required) {
      ::close(control[0]);
      ::close(control[1]);
      ::close(events[0]);
      ::close(events[1]);
      throw Error("isolation pid",
                  "cannot run the job in its own PID namespace: " + handle.why_not_isolated,
                  "run as root, or enable unprivileged user namespaces");
    }
  }
  if (pid < 0) pid = ::fork();
  if (pid < 0) throw Error("guard", "fork: " + errno_text(errno), "the system is out of processes");
  if (pid == 0) {
    ::close(control[1]);
    ::close(events[0]);
    guard_main(spec, cgroup, options, control[0], events[1]);
  }
  ::close(control[0]);
  ::close(events[1]);
  ::fcntl(events[0], F_SETFL, O_NONBLOCK);
  // A guard that stops reading must never block the supervisor's event loop.
  ::fcntl(control[1], F_SETFL, O_NONBLOCK);
  handle.pid = pid;
  handle.events_fd = events[0];
  handle.control_fd = control[1];
  return handle;
}

void send_guard_order(int control_fd, GuardOrderKind kind, std::int64_t value) noexcept {
  if (control_fd < 0) return;
  GuardOrder order{kind, 0, value};
  while (::write(control_fd, &order, sizeof order) < 0 && errno == EINTR) {
  }
}

}  // namespace spendcap
