#include "spendcap/supervise/reporter.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "spendcap/base/text.hpp"

namespace spendcap {

namespace {

// Milestone lines are few; more than this waiting means stderr is stuck, and lines are dropped.
constexpr size_t kMaxQueuedLines = 64;
constexpr auto kExitWait = std::chrono::milliseconds(200);

// The byte before `at` in the regular file `fd`, read back through /proc when stderr was opened
// write-only (`2>file`). Nothing when it cannot be read.
std::optional<char> byte_before(int fd, off_t at) {
  char last = 0;
  if (::pread(fd, &last, 1, at - 1) == 1) return last;
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  int readable = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (readable < 0) return std::nullopt;
  ssize_t n = ::pread(readable, &last, 1, at - 1);
  ::close(readable);
  if (n != 1) return std::nullopt;
  return last;
}

// What a line starts with: "\r\e[K" on a terminal; off it, "\n" when the line would otherwise
// stick to the end of someone else's: `fd` is a regular file whose byte before the write position
// (the end, with O_APPEND) is not a newline, or something that cannot be read back (a pipe, a
// socket, an unreadable file) that the job may have written to (`job_writes`).
std::string line_start(int fd, bool tty, bool job_writes) {
  if (tty) return "\r\033[K";
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return job_writes ? "\n" : "";
  int flags = ::fcntl(fd, F_GETFL);
  off_t at = (flags >= 0 && (flags & O_APPEND)) ? st.st_size : ::lseek(fd, 0, SEEK_CUR);
  if (at <= 0) return "";
  std::optional<char> last = byte_before(fd, at);
  if (!last) return job_writes ? "\n" : "";
  return *last == '\n' ? "" : "\n";
}

void write_all(int fd, const std::string& text) {
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // closed (EPIPE, SIGPIPE ignored) or broken: nothing else to do
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace

struct Reporter::Line {
  int fd;
  std::string text;
  bool starts_line;  // a "spendcap: " line: it starts at the beginning of a line
  bool job_writes;   // the job may write to the same file meanwhile
};

// Shared with the writer thread, which may outlive the Reporter when stderr is stuck at exit.
struct Reporter::Queue {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<Line> lines;
  bool writing = false;
  bool stopping = false;
};

Reporter::Reporter(bool quiet, bool title)
    : quiet_(quiet), title_(title), tty_(::isatty(STDERR_FILENO) == 1) {}

Reporter::Reporter(bool quiet, bool title, int log_fd) : Reporter(quiet, title) {
  log_fd_ = log_fd;
}

Reporter::~Reporter() {
  if (title_pushed_) write("\033[23;0t");  // pop the title saved by the first title()
  flush();
  if (!queue_) return;
  std::lock_guard lock(queue_->mutex);
  queue_->stopping = true;
  queue_->changed.notify_all();
  // The log fd stays open for a writer thread still stuck on stderr: it is spendcap's exit next.
}

void Reporter::flush() const {
  if (!queue_) return;
  // Give what is queued (the summary line) a moment; a stuck stderr must not hold up the exit.
  std::unique_lock lock(queue_->mutex);
  queue_->changed.wait_for(lock, kExitWait,
                           [&] { return queue_->lines.empty() && !queue_->writing; });
}

void Reporter::write_in_background() {
  if (queue_) return;
  queue_ = std::make_shared<Queue>();
  std::thread([queue = queue_] {
    std::unique_lock lock(queue->mutex);
    while (true) {
      queue->changed.wait(lock, [&] { return queue->stopping || !queue->lines.empty(); });
      if (queue->lines.empty()) return;
      Line line = std::move(queue->lines.front());
      queue->lines.pop_front();
      queue->writing = true;
      lock.unlock();
      write_line_now(line);
      lock.lock();
      queue->writing = false;
      queue->changed.notify_all();
    }
  }).detach();
}

void Reporter::write(std::string text) const {
  enqueue(Line{STDERR_FILENO, std::move(text), false, false});
}

void Reporter::enqueue(Line line) const {
  if (!queue_) {
    write_line_now(line);
    return;
  }
  line.job_writes = true;  // the job runs from write_in_background() on
  std::lock_guard lock(queue_->mutex);
  if (queue_->lines.size() >= kMaxQueuedLines) return;
  queue_->lines.push_back(std::move(line));
  queue_->changed.notify_all();
}

void Reporter::write_line_now(const Line& line) {
  // The start is decided at the moment of writing, in the same write(2) as the line.
  if (!line.starts_line) {
    write_all(line.fd, line.text);
    return;
  }
  bool tty = ::isatty(line.fd) == 1;
  write_all(line.fd, line_start(line.fd, tty, line.job_writes) + line.text);
}

void Reporter::line(const std::string& text) const {
  if (quiet_) return;
  write_line(text, false);
}

void Reporter::error(const std::string& text) const {
  write_line(text, true);
}

void Reporter::write_line(const std::string& text, bool error) const {
  std::string line = "spendcap: " + escape_for_terminal(text) + "\n";
  if (log_fd_ >= 0) enqueue(Line{log_fd_, line, true, false});
  if (log_fd_ < 0 || error) enqueue(Line{STDERR_FILENO, line, true, false});
}

void Reporter::title(const std::string& text) {
  if (!title_enabled()) return;
  std::string sequence;
  if (!title_pushed_) {
    sequence = "\033[22;0t";  // push the current title, restored on exit
    title_pushed_ = true;
  }
  write(sequence + "\033]0;" + escape_for_terminal(text) + "\007");
}

}  // namespace spendcap
