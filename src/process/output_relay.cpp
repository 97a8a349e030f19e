#include "spendcap/process/output_relay.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <ctime>

#include "spendcap/process/launcher.hpp"

namespace spendcap {

// Shared between spendcap and the relay (MAP_SHARED, made before the fork).
struct OutputRelay::Page {
  std::atomic<std::uint64_t> lines_sent{0};     // bytes spendcap wrote to the lines pipe
  std::atomic<std::uint64_t> lines_relayed{0};  // of those, bytes the relay has written out
  std::atomic<int> job_closed{0};               // the job's side reached EOF
  std::atomic<int> gone{0};                     // the relay stopped (the original's reader left)
};

namespace {

// The relay's own fds, moved there before everything else is closed.
constexpr int kJobFd = 3;
constexpr int kLinesFd = 4;
constexpr size_t kReadBytes = 65536;

bool same_file(int a, int b) {
  struct stat sa {
  }, sb{};
  return ::fstat(a, &sa) == 0 && ::fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

// False when the original pipe is gone (EPIPE) or broken.
bool write_all(int fd, const char* p, size_t left) {
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

ssize_t read_some(int fd, char* buffer, size_t size) {
  while (true) {
    ssize_t n = ::read(fd, buffer, size);
    if (n < 0 && errno == EINTR) continue;
    return n;
  }
}

bool wait_readable(pollfd* fds, nfds_t count) {
  while (true) {
    int n = ::poll(fds, count, -1);
    if (n >= 0) return true;
    if (errno != EINTR) return false;
  }
}

struct Relay {
  std::atomic<std::uint64_t>* relayed;
  bool at_line_start = true;  // spendcap's lines before the relay all ended with one
  bool in_line = false;       // in the middle of one of spendcap's lines
  char in[kReadBytes];
  char out[kReadBytes + 1];

  // The job's bytes, as they came.
  bool job(const char* data, size_t size) {
    if (!write_all(STDERR_FILENO, data, size)) return false;
    at_line_start = data[size - 1] == '\n';
    return true;
  }

  // spendcap's bytes: each of its lines starts at the beginning of a line.
  bool lines(const char* data, size_t size) {
    size_t used = 0;
    for (size_t i = 0; i < size; ++i) {
      if (!in_line) {
        if (!at_line_start) out[used++] = '\n';
        in_line = true;
      }
      out[used++] = data[i];
      if (data[i] == '\n') in_line = false;
      at_line_start = data[i] == '\n';
      if (used >= kReadBytes) {
        if (!write_all(STDERR_FILENO, out, used)) return false;
        used = 0;
      }
    }
    if (used > 0 && !write_all(STDERR_FILENO, out, used)) return false;
    relayed->fetch_add(size, std::memory_order_release);
    return true;
  }
};

[[noreturn]] void relay_main(std::atomic<std::uint64_t>* relayed, std::atomic<int>* job_closed,
                             std::atomic<int>* gone) {
  static Relay relay{relayed};
  int job_fd = kJobFd;
  int lines_fd = kLinesFd;
  auto stop = [&] {
    gone->store(1, std::memory_order_release);
    ::_exit(0);
  };
  while (job_fd >= 0 || lines_fd >= 0) {
    pollfd fds[2] = {{job_fd, POLLIN, 0}, {lines_fd, POLLIN, 0}};
    if (!wait_readable(fds, 2)) stop();
    // The job first: bytes it wrote before one of spendcap's lines came go out before it.
    if (job_fd >= 0 && fds[0].revents) {
      ssize_t n = read_some(job_fd, relay.in, sizeof relay.in);
      if (n > 0) {
        if (!relay.job(relay.in, static_cast<size_t>(n))) stop();
      } else {
        ::close(job_fd);
        job_fd = -1;
        job_closed->store(1, std::memory_order_release);
      }
    }
    if (lines_fd >= 0 && fds[1].revents) {
      // A line read in part is read to its end before the job's next bytes: its writer (one
      // write(2) per line) is already writing the rest.
      do {
        ssize_t n = read_some(lines_fd, relay.in, sizeof relay.in);
        if (n <= 0) {
          ::close(lines_fd);
          lines_fd = -1;
          break;
        }
        if (!relay.lines(relay.in, static_cast<size_t>(n))) stop();
      } while (relay.in_line);
    }
  }
  ::_exit(0);
}

}  // namespace

std::unique_ptr<OutputRelay> OutputRelay::start() {
  struct stat st {};
  if (::fstat(STDERR_FILENO, &st) != 0 || !S_ISFIFO(st.st_mode)) return nullptr;
  std::unique_ptr<OutputRelay> relay(new OutputRelay);
  void* shared =
      ::mmap(nullptr, sizeof(Page), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) return nullptr;
  relay->page_ = new (shared) Page;
  int job[2];
  int lines[2];
  if (::pipe2(job, O_CLOEXEC) != 0) return nullptr;
  if (::pipe2(lines, O_CLOEXEC) != 0) {
    ::close(job[0]);
    ::close(job[1]);
    return nullptr;
  }
  // The job's pipe holds what the original holds, so a job blocks where it blocked before.
  int capacity = ::fcntl(STDERR_FILENO, F_GETPIPE_SZ);
  if (capacity > 0) ::fcntl(job[1], F_SETPIPE_SZ, capacity);
  relay->relay_stdout_ = same_file(STDOUT_FILENO, STDERR_FILENO);
  Page* page = relay->page_;
  pid_t pid = ::fork();
  if (pid < 0) {
    for (int fd : {job[0], job[1], lines[0], lines[1]}) ::close(fd);
    return nullptr;
  }
  if (pid == 0) {
    ::prctl(PR_SET_NAME, "spendcap-relay");
    for (int signal : kGuardIgnoredSignals) ::signal(signal, SIG_IGN);
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    // Only the two pipes and the original (stderr) stay open: a copy of anything else (stdout's
    // pipe, a make jobserver) would keep its reader waiting for the relay.
    int job_read = ::fcntl(job[0], F_DUPFD, 10);
    int lines_read = ::fcntl(lines[0], F_DUPFD, 10);
    ::dup2(job_read, kJobFd);
    ::dup2(lines_read, kLinesFd);
    ::close_range(kLinesFd + 1, ~0U, 0);
    int null = ::open("/dev/null", O_RDWR);
    if (null >= 0) {
      ::dup2(null, STDIN_FILENO);
      ::dup2(null, STDOUT_FILENO);
      if (null > STDERR_FILENO && null != kJobFd && null != kLinesFd) ::close(null);
    }
    relay_main(&page->lines_relayed, &page->job_closed, &page->gone);
  }
  ::close(job[0]);
  ::close(lines[0]);
  relay->pid_ = pid;
  relay->job_fd_ = job[1];
  relay->lines_fd_ = lines[1];
  return relay;
}

OutputRelay::~OutputRelay() {
  if (job_fd_ >= 0) ::close(job_fd_);
  // The lines' side stays open: spendcap may still print an error on its way out, and its exit
  // closes it. The page stays mapped for the same reason.
}

void OutputRelay::give_job_side() {
  saved_fds_[STDERR_FILENO] = ::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 10);
  ::dup2(job_fd_, STDERR_FILENO);
  if (relay_stdout_) {
    saved_fds_[STDOUT_FILENO] = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 10);
    ::dup2(job_fd_, STDOUT_FILENO);
  }
}

void OutputRelay::take_back_own_side() {
  for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
    if (saved_fds_[fd] < 0) continue;
    ::dup2(saved_fds_[fd], fd);
    ::close(saved_fds_[fd]);
    saved_fds_[fd] = -1;
  }
  ::close(job_fd_);
  job_fd_ = -1;
}

void OutputRelay::send_line(const std::string& line) const {
  if (line.empty()) return;
  page_->lines_sent.fetch_add(line.size(), std::memory_order_release);
  write_all(lines_fd_, line.data(), line.size());
}

void OutputRelay::drain(std::chrono::milliseconds bound) const {
  // The relay finishes within one read of the tree's exit; a pipe nobody reads could hold it
  // forever, and spendcap's exit must not wait on that.
  auto deadline = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < deadline) {
    if (page_->gone.load(std::memory_order_acquire)) return;
    if (page_->job_closed.load(std::memory_order_acquire) &&
        page_->lines_relayed.load(std::memory_order_acquire) ==
            page_->lines_sent.load(std::memory_order_acquire)) {
      return;
    }
    timespec pause{0, 1'000'000};  // 1 ms: the relay's own work is a read and a write
    ::nanosleep(&pause, nullptr);
  }
}

}  // namespace spendcap
