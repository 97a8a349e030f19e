#include "spendcap/supervise/reporter.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "spendcap/base/text.hpp"
#include "spendcap/process/output_relay.hpp"
#include "spendcap/process/tree_guard.hpp"

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

// "wchar: 123" from /proc/PID/io or /proc/PID/task/TID/io.
std::optional<std::uint64_t> wchar_of(const std::string& io_path) {
  std::ifstream in(io_path);
  std::string key;
  std::uint64_t value = 0;
  while (in >> key >> value) {
    if (key == "wchar:") return value;
  }
  return std::nullopt;
}

std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> children;
  std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  DIR* dir = ::opendir(tasks.c_str());
  if (!dir) return children;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    std::ifstream in(tasks + "/" + entry->d_name + "/children");
    pid_t child = 0;
    while (in >> child) children.push_back(child);
  }
  ::closedir(dir);
  return children;
}

}  // namespace

std::optional<std::uint64_t> write_count_of_tree(pid_t guard,
                                                 const std::atomic<std::uint64_t>* reaped_written) {
  if (guard <= 0) return std::nullopt;
  std::string base = "/proc/" + std::to_string(guard);
  // The guard's whole count holds its children's once reaped (the kernel adds a reaped child's
  // I/O to its parent's); its own threads' counts are its event pipe, not the job's output.
  std::optional<std::uint64_t> total = wchar_of(base + "/io");
  std::uint64_t own = 0;
  if (!total) {
    // Not readable: the guard is not dumpable, and only root may read it. The guard's own count,
    // published after each reap (tree_guard.hpp), stands for it.
    std::uint64_t published =
        reaped_written ? reaped_written->load(std::memory_order_acquire) : kNotPublished;
    if (published == kNotPublished) return std::nullopt;
    total = published;
  } else if (DIR* dir = ::opendir((base + "/task").c_str())) {
    while (dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] == '.') continue;
      auto thread = wchar_of(base + "/task/" + entry->d_name + "/io");
      if (!thread) {
        ::closedir(dir);
        return std::nullopt;
      }
      own += *thread;
    }
    ::closedir(dir);
  }
  std::uint64_t written = *total >= own ? *total - own : 0;
  // The live descendants, each with its own reaped children in its count. A process that exits
  // between two reads moves its count to its parent's; a count that moved or changed in any way
  // only makes the next line start with a newline.
  std::vector<pid_t> pending = children_of(guard);
  for (size_t i = 0; i < pending.size() && i < 100000; ++i) {
    std::optional<std::uint64_t> count = wchar_of("/proc/" + std::to_string(pending[i]) + "/io");
    if (!count) {
      // Gone since it was listed (its count is now its parent's), or not readable: unknown.
      if (::access(("/proc/" + std::to_string(pending[i])).c_str(), F_OK) == 0) {
        return std::nullopt;
      }
      continue;
    }
    written += *count;
    for (pid_t child : children_of(pending[i])) pending.push_back(child);
  }
  return written;
}

// The job's write count when spendcap's last line on a pipe ended, while the job had written
// nothing since: the pipe is then at the start of a line.
struct Reporter::CleanMark {
  std::mutex mutex;
  std::function<std::optional<std::uint64_t>()> count;
  std::optional<std::optional<std::uint64_t>> frozen;  // set once the tree is gone
  std::optional<std::uint64_t> clean_at;
  std::optional<std::uint64_t> read() { return frozen ? *frozen : count(); }
};

struct Reporter::Line {
  int fd;
  std::string text;
  bool starts_line;  // a "spendcap: " line: it starts at the beginning of a line
  bool job_writes;   // the job may write to the same file meanwhile
  std::shared_ptr<CleanMark> clean;
  const OutputRelay* relay = nullptr;  // set: the line goes through the job's relay
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
  line.clean = clean_;
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
  if (line.relay) {
    line.relay->send_line(line.text);  // the relay starts it on a new line when it must
    return;
  }
  bool tty = ::isatty(line.fd) == 1;
  struct stat st {};
  bool pipe_like = !tty && (::fstat(line.fd, &st) != 0 || !S_ISREG(st.st_mode));
  if (!pipe_like || !line.job_writes || !line.clean) {
    write_all(line.fd, line_start(line.fd, tty, line.job_writes) + line.text);
    return;
  }
  // Never locked across the write: it may block on a pipe nobody reads, and the event loop takes
  // the lock to freeze the count (freeze_job_write_count). Only this thread sets clean_at.
  std::optional<std::uint64_t> before;
  bool clean = false;
  {
    std::lock_guard lock(line.clean->mutex);
    before = line.clean->read();
    clean = before && line.clean->clean_at == before;
  }
  write_all(line.fd, (clean ? "" : "\n") + line.text);
  std::lock_guard lock(line.clean->mutex);
  std::optional<std::uint64_t> after = line.clean->read();
  line.clean->clean_at = before && after == before ? before : std::nullopt;
}

void Reporter::set_job_write_count(std::function<std::optional<std::uint64_t>()> count) {
  clean_ = std::make_shared<CleanMark>();
  clean_->count = std::move(count);
  // The tree's count starts at 0 when the guard is forked: a line while it is still 0 comes
  // before anything the job wrote, as a line written before the job ran never needed a newline.
  clean_->clean_at = 0;
}

void Reporter::freeze_job_write_count() {
  if (!clean_) return;
  std::lock_guard lock(clean_->mutex);
  if (!clean_->frozen) clean_->frozen = clean_->count();
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
  if (log_fd_ < 0 || error) enqueue(Line{STDERR_FILENO, line, true, false, nullptr, relay_});
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
