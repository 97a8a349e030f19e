#include "spendcap/integrations/spot_notice.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <system_error>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "spendcap/base/error.hpp"
#include "spendcap/supervise/reporter.hpp"

namespace spendcap {

namespace {

namespace asio = boost::asio;

// The link-local address both clouds serve their metadata on.
constexpr const char* kMetadataBase = "http://169.254.169.254";
// A metadata server answers in milliseconds; one that takes longer is not there.
constexpr Nanos kRequestTimeout = std::chrono::seconds(2);
// What the final row, status file and notifier need after SIGKILL, inside the notice window.
constexpr Nanos kFinalMargin = std::chrono::seconds(10);

std::string trimmed(const std::string& text) {
  size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t\r\n") - begin + 1);
}

HttpUrl joined(const HttpUrl& base, const std::string& path) {
  HttpUrl url = base;
  std::string prefix = base.path == "/" ? "" : base.path;
  if (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  url.path = prefix + path;
  return url;
}

class SpotNoticePart : public RunPart {
 public:
  SpotNoticePart(SpotNotice notice, asio::io_context& io, Reporter& reporter,
                 std::function<void(std::string)> preempt)
      : notice_(std::move(notice)),
        io_(io),
        reporter_(reporter),
        preempt_(std::move(preempt)),
        cancel_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

  ~SpotNoticePart() override {
    stop();
    if (cancel_fd_ >= 0) ::close(cancel_fd_);
  }

  void on_launched(TimePoint) override {
    if (cancel_fd_ < 0) {
      reporter_.error("--spot-notice: eventfd failed: " + errno_text(errno) +
                      "; no spot notices are watched");
      return;
    }
    try {
      poller_ = std::thread([this] { poll(); });
    } catch (const std::system_error& error) {
      // The job may hold the user's last process slot (RLIMIT_NPROC counts threads).
      reporter_.error(std::string("--spot-notice: cannot start its thread: ") + error.what() +
                      "; no spot notices are watched");
    }
  }

  void on_stopping() override { stop(); }
  void on_finish() override { stop(); }

 private:
  // The poller's thread: one request at a time, a cancellable wait between them.
  void poll() {
    std::string token, last_error;
    while (!stopped_) {
      std::string error;
      auto text = check_spot_notice(notice_, token, cancel_fd_, error);
      if (stopped_) return;
      if (text) {
        std::string reason = "spot-notice:" + notice_.name();
        std::string line = "spot notice (" + notice_.name() + "): " + *text;
        asio::post(io_, [this, reason, line] {
          reporter_.line(line);
          preempt_(reason);
        });
        return;
      }
      // An endpoint that does not answer is said once, not at every poll.
      if (!error.empty() && error != last_error) {
        asio::post(io_, [this, error] { reporter_.error("--spot-notice: " + error); });
      }
      last_error = error;
      pollfd fd{cancel_fd_, POLLIN, 0};
      ::poll(&fd, 1,
             static_cast<int>(
                 std::chrono::duration_cast<std::chrono::milliseconds>(notice_.poll_interval)
                     .count()));
    }
  }

  // The event loop's side: wakes the poller (and a request in flight) and waits for it.
  void stop() {
    if (!poller_.joinable()) return;
    stopped_ = true;
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(cancel_fd_, &one, sizeof(one));
    poller_.join();
  }

  SpotNotice notice_;
  asio::io_context& io_;
  Reporter& reporter_;
  std::function<void(std::string)> preempt_;
  int cancel_fd_;
  std::atomic<bool> stopped_{false};
  std::thread poller_;
};

}  // namespace

std::string SpotNotice::name() const {
  switch (cloud) {
    case SpotCloud::aws:
      return "aws";
    case SpotCloud::gcp:
      return "gcp";
    case SpotCloud::url:
      return "url";
  }
  return "?";
}

SpotNotice parse_spot_notice(const std::string& value, const std::string& base_override) {
  SpotNotice notice;
  notice.poll_interval = std::chrono::seconds(5);
  std::string base = base_override.empty() ? kMetadataBase : base_override;
  const std::string flag = base_override.empty() ? "--spot-notice" : "--spot-notice-url";
  if (value == "aws") {
    notice.cloud = SpotCloud::aws;
    notice.window = std::chrono::minutes(2);
    notice.base = parse_http_url(base, flag);
  } else if (value == "gcp") {
    notice.cloud = SpotCloud::gcp;
    notice.window = std::chrono::seconds(30);
    notice.base = parse_http_url(base, flag);
  } else if (value.rfind("http://", 0) == 0) {
    notice.cloud = SpotCloud::url;
    notice.window = std::chrono::seconds(30);
    notice.base = parse_http_url(value, "--spot-notice");
  } else {
    throw Error("--spot-notice " + value, "not aws, gcp or an http:// URL",
                "e.g. --spot-notice aws on an EC2 spot instance", ExitCode::internal);
  }
  return notice;
}

ShutdownTimes preemption_times(const SpotNotice& notice, const ShutdownTimes& on_trip,
                               const ShutdownTimes& on_signal) {
  ShutdownTimes times;
  times.kill_after = on_signal.kill_after;
  Nanos room = notice.window - times.kill_after - kReapingSlack - kFinalMargin;
  times.grace = std::clamp(room, Nanos{}, on_trip.grace);
  return times;
}

std::optional<std::string> check_spot_notice(const SpotNotice& notice, std::string& token,
                                             int cancel_fd, std::string& error) {
  MetadataRequest request;
  switch (notice.cloud) {
    case SpotCloud::aws: {
      if (token.empty()) {
        MetadataRequest put{"PUT",
                            joined(notice.base, "/latest/api/token"),
                            {{"X-aws-ec2-metadata-token-ttl-seconds", "21600"}}};
        auto answer = http_request(put, kRequestTimeout, cancel_fd, error);
        if (!answer) return std::nullopt;
        if (answer->status != 200) {
          error = "IMDSv2 token: HTTP " + std::to_string(answer->status);
          return std::nullopt;
        }
        token = trimmed(answer->body);
      }
      request.url = joined(notice.base, "/latest/meta-data/spot/instance-action");
      request.headers["X-aws-ec2-metadata-token"] = token;
      break;
    }
    case SpotCloud::gcp:
      request.url = joined(notice.base, "/computeMetadata/v1/instance/preempted");
      request.headers["Metadata-Flavor"] = "Google";
      break;
    case SpotCloud::url:
      request.url = notice.base;
      break;
  }
  auto answer = http_request(request, kRequestTimeout, cancel_fd, error);
  if (!answer) return std::nullopt;
  std::string body = trimmed(answer->body);
  if (answer->status == 401 && notice.cloud == SpotCloud::aws) {
    token.clear();  // expired: the next poll fetches a new one
    error = "IMDSv2 token refused (HTTP 401)";
    return std::nullopt;
  }
  if (answer->status == 404) return std::nullopt;  // AWS: no action scheduled
  if (answer->status != 200) {
    error = request.url.path + ": HTTP " + std::to_string(answer->status);
    return std::nullopt;
  }
  switch (notice.cloud) {
    case SpotCloud::aws:
      return body.empty() ? "instance action" : body;
    case SpotCloud::gcp:
      if (body == "TRUE") return "preempted";
      return std::nullopt;
    case SpotCloud::url:
      if (body.empty() || body == "false" || body == "FALSE") return std::nullopt;
      return body;
  }
  return std::nullopt;
}

PreemptionPartFactory spot_notice_part(SpotNotice notice) {
  return [notice](asio::io_context& io, Reporter& reporter,
                  std::function<void(std::string)> preempt) -> std::unique_ptr<RunPart> {
    return std::make_unique<SpotNoticePart>(notice, io, reporter, std::move(preempt));
  };
}

}  // namespace spendcap
