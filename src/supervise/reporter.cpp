#include "spendcap/supervise/reporter.hpp"

#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "spendcap/base/text.hpp"

namespace spendcap {

namespace {

// Milestone lines are few; more than this waiting means stderr is stuck, and lines are dropped.
constexpr size_t kMaxQueuedLines = 64;
constexpr auto kExitWait = std::chrono::milliseconds(200);

void write_all(const std::string& text) {
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // closed (EPIPE, SIGPIPE ignored) or broken: nothing else to do
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace

// Shared with the writer thread, which may outlive the Reporter when stderr is stuck at exit.
struct Reporter::Queue {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::string> lines;
  bool writing = false;
  bool stopping = false;
};

Reporter::Reporter(bool quiet, bool title)
    : quiet_(quiet), title_(title), tty_(::isatty(STDERR_FILENO) == 1) {}

Reporter::~Reporter() {
  if (title_pushed_) write("\033[23;0t");  // pop the title saved by the first title()
  flush();
  if (!queue_) return;
  std::lock_guard lock(queue_->mutex);
  queue_->stopping = true;
  queue_->changed.notify_all();
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
      std::string text = std::move(queue->lines.front());
      queue->lines.pop_front();
      queue->writing = true;
      lock.unlock();
      write_all(text);
      lock.lock();
      queue->writing = false;
      queue->changed.notify_all();
    }
  }).detach();
}

void Reporter::write(std::string text) const {
  if (!queue_) {
    write_all(text);
    return;
  }
  std::lock_guard lock(queue_->mutex);
  if (queue_->lines.size() >= kMaxQueuedLines) return;
  queue_->lines.push_back(std::move(text));
  queue_->changed.notify_all();
}

void Reporter::line(const std::string& text) const {
  if (!quiet_) error(text);
}

void Reporter::error(const std::string& text) const {
  write((tty_ ? "\r\033[K" : "") + std::string("spendcap: ") + escape_for_terminal(text) + "\n");
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
