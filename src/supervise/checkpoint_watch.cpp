#include "spendcap/supervise/checkpoint_watch.hpp"

#include <sys/inotify.h>
#include <unistd.h>

#include "spendcap/base/acting_user.hpp"

namespace asio = boost::asio;

namespace spendcap {

CheckpointWatch::CheckpointWatch(asio::io_context& io, std::string done_path, KillPath& kill_path)
    : io_(io), done_path_(std::move(done_path)), kill_path_(kill_path) {}

void CheckpointWatch::watch() {
  if (done_path_.empty()) return;
  std::string dir = done_path_.substr(0, done_path_.rfind('/'));
  int fd = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (fd < 0) return;
  // Watch first, then look: a file created in between is seen by one or the other.
  watch_ = ::inotify_add_watch(fd, dir.c_str(), IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE);
  inotify_ = std::make_unique<asio::posix::stream_descriptor>(io_, fd);
  if (written()) return;
  read();
}

void CheckpointWatch::read() {
  inotify_->async_read_some(asio::buffer(buffer_), [this](auto error, size_t) {
    if (error) return;
    if (kill_path_.phase() != KillPhase::grace) {
      unwatch();
      return;
    }
    if (!written()) read();
  });
}

bool CheckpointWatch::written() {
  if (access_as_user(done_path_.c_str(), F_OK) != 0) return false;
  if (kill_path_.checkpoint_done()) unwatch();
  return true;
}

void CheckpointWatch::close() {
  if (inotify_) unwatch();
}

// The watch removed and the read cancelled; the instance is closed with this part, later:
// closing it waits for the kernel to reap removed watches (a fsnotify SRCU grace period, 4 to
// 24 ms measured here), and the reaping, started by the removal, runs meanwhile (guard_part.cpp).
void CheckpointWatch::unwatch() {
  if (!inotify_->is_open() || watch_ < 0) return;
  ::inotify_rm_watch(inotify_->native_handle(), watch_);
  watch_ = -1;
  boost::system::error_code ignored;
  inotify_->cancel(ignored);
}

}  // namespace spendcap
