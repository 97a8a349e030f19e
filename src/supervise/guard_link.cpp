#include "spendcap/supervise/guard_link.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cerrno>
#include <cstring>
#include <string>

namespace asio = boost::asio;

namespace spendcap {

namespace {

class PipeGuardLink final : public GuardLink {
 public:
  explicit PipeGuardLink(const GuardHandle& guard) : guard_(guard) {}
  ~PipeGuardLink() override {
    events_.reset();  // closes events_fd
    if (!listening_ && guard_.events_fd >= 0) ::close(guard_.events_fd);
    if (guard_.control_fd >= 0) ::close(guard_.control_fd);
  }

  TimePoint now() const override { return spendcap::now(); }
  pid_t pid() const override { return guard_.pid; }
  bool isolated() const override { return guard_.isolated; }

  void listen(asio::io_context& io, std::function<void(const GuardEvent&)> on_event,
              std::function<void()> on_lost) override {
    events_ = std::make_unique<asio::posix::stream_descriptor>(io, guard_.events_fd);
    listening_ = true;
    on_event_ = std::move(on_event);
    on_lost_ = std::move(on_lost);
    read();
  }

  void order(GuardOrderKind kind, std::int64_t value) override {
    send_guard_order(guard_.control_fd, kind, value);
  }

  void kill() override { ::kill(guard_.pid, SIGKILL); }

  // WNOWAIT leaves the guard to reap().
  bool exited(bool wait) override {
    if (guard_.pid <= 0) return false;
    siginfo_t info{};
    int rc = 0;
    while ((rc = ::waitid(P_PID, static_cast<id_t>(guard_.pid), &info,
                          WEXITED | WNOWAIT | (wait ? 0 : WNOHANG))) < 0 &&
           errno == EINTR) {
    }
    return rc == 0 && info.si_pid == guard_.pid;
  }

  void reap() override {
    while (::waitpid(guard_.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }

 private:
  void read() {
    events_->async_read_some(asio::buffer(buffer_), [this](auto error, size_t bytes) {
      pending_.append(buffer_.data(), bytes);
      while (pending_.size() >= sizeof(GuardEvent)) {
        GuardEvent event;
        std::memcpy(&event, pending_.data(), sizeof event);
        pending_.erase(0, sizeof event);
        on_event_(event);
      }
      if (error) {
        on_lost_();
        return;
      }
      read();
    });
  }

  GuardHandle guard_;
  std::unique_ptr<asio::posix::stream_descriptor> events_;
  bool listening_ = false;
  std::function<void(const GuardEvent&)> on_event_;
  std::function<void()> on_lost_;
  std::array<char, 16 * sizeof(GuardEvent)> buffer_{};
  std::string pending_;
};

}  // namespace

std::unique_ptr<GuardLink> guard_link(const GuardHandle& guard) {
  return std::make_unique<PipeGuardLink>(guard);
}

}  // namespace spendcap
