#include "spendcap/supervise/guard_part.hpp"

#include <fcntl.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <set>
#include <vector>

#include "spendcap/base/text.hpp"
#include "spendcap/guards/run_guard.hpp"
#include "spendcap/ledger/ledger.hpp"
#include "spendcap/spend/meter.hpp"
#include "spendcap/supervise/reporter.hpp"
#include "spendcap/supervise/run_part.hpp"

namespace asio = boost::asio;

namespace spendcap {

namespace {

// At most this much of the progress file is read per interval: a job that writes faster than
// that is read over several intervals, and one read never holds more than this in memory.
constexpr std::size_t kReadPerInterval = 1024 * 1024;

// Reads what was appended to the progress file since the last read. The job may create it late,
// truncate or replace it: a file shorter than what was read is read again from its start.
class ProgressFile {
 public:
  explicit ProgressFile(std::string path) : path_(std::move(path)) {}
  ~ProgressFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  ProgressFile(const ProgressFile&) = delete;
  ProgressFile& operator=(const ProgressFile&) = delete;

  // The new bytes, at most kReadPerInterval.
  std::string read_new() {
    std::string out;
    if (path_.empty()) return out;
    if (fd_ < 0) {
      fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
      if (fd_ < 0) return out;
    }
    std::array<char, 64 * 1024> buffer;
    while (out.size() < kReadPerInterval) {
      ssize_t got = ::pread(fd_, buffer.data(), buffer.size(), offset_);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      offset_ += got;
      out.append(buffer.data(), static_cast<std::size_t>(got));
    }
    return out;
  }

 private:
  std::string path_;
  int fd_ = -1;
  off_t offset_ = 0;
};

// The progress file's directory watched with inotify: an event for the file's name says it was
// created, written or replaced. -1 when inotify cannot watch it (no instance or watch left, a
// directory the supervisor cannot read): the part then polls every kProgressPoll. `watch` gets
// the watch's descriptor, for stop().
int watch_progress_dir(const std::string& path, int& watch) {
  std::string dir = path.substr(0, path.rfind('/'));
  int fd = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (fd < 0) return -1;
  watch =
      ::inotify_add_watch(fd, dir.c_str(), IN_CREATE | IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO);
  if (watch < 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

class GuardPart final : public RunPart {
 public:
  GuardPart(asio::io_context& io, const Reporter& reporter, const Meter& meter,
            const RunTerms& terms, const GuardPlan& plan, std::function<void(const Trip&)> trip,
            std::optional<ProgressState>& progress_out, std::optional<LiveProgress>& progress_live)
      : timer_(io),
        poll_timer_(io),
        inotify_(io),
        reporter_(reporter),
        meter_(meter),
        plan_(terms),
        guards_plan_(plan),
        trip_(std::move(trip)),
        progress_out_(progress_out),
        progress_live_(progress_live),
        file_(plan.progress_path) {
    const GuardPlan& g = plan;
    if (!g.progress_path.empty()) guards_.push_back(make_projection_guard(g.require_fit));
    if (g.stall_after) guards_.push_back(make_stall_guard(*g.stall_after));
    if (g.burn_rate) {
      guards_.push_back(make_burn_rate_guard(g.burn_rate->factor, g.burn_rate->expected_per_hour,
                                             g.burn_rate->experiment));
    }
    if (!g.progress_path.empty()) {
      progress_name_ = g.progress_path.substr(g.progress_path.rfind('/') + 1);
    }
  }

  // The progress file is first read kWatchProgressAfter after the launch, when its directory's
  // watch starts: a run shorter than that makes no inotify instance (closing one costs the run's
  // way out a fsnotify SRCU grace period, 4 to 24 ms measured here, see stop()), and its lines
  // are read at the end.
  void on_launched(TimePoint) override {
    check();
    if (guards_plan_.progress_path.empty()) return;
    poll_timer_.expires_after(kWatchProgressAfter);
    poll_timer_.async_wait([this](auto error) {
      if (error || stopped_) return;
      // Watch first, then read: a line written in between is seen by one or the other.
      if (int fd = watch_progress_dir(guards_plan_.progress_path, watch_); fd >= 0) {
        inotify_.assign(fd);
        read_progress(now());
        check();
        if (!stopped_) wait_for_writes();
      } else {
        poll();
      }
    });
  }
  void on_stopping() override { stop(); }
  void on_finish() override {
    stop();
    read_progress(now());
    if (state_.good_lines + state_.bad_lines > 0) {
      reporter_.line(progress_summary(state_, plan_.currency));
      progress_out_ = state_;
    }
  }

 private:
  void stop() {
    stopped_ = true;
    timer_.cancel();
    poll_timer_.cancel();
    if (inotify_.is_open() && watch_ >= 0) {
      // The watch is removed here and the instance closed only when the part goes, after the
      // final row: closing an instance waits for the kernel to reap its removed watches (a
      // fsnotify SRCU grace period, 4 to 24 ms measured here), and the reaping, started by the
      // removal, runs meanwhile. Closed at once it added 8 ms (median) to every run's way out.
      ::inotify_rm_watch(inotify_.native_handle(), watch_);
      watch_ = -1;
      boost::system::error_code ignored;
      inotify_.cancel(ignored);
    }
  }

  // Sleeps until the job writes the progress file (an idle run is not woken at all). A write is
  // read at once; later writes are read together kProgressPoll after it, so that a job that
  // writes every millisecond costs no more wakeups than polling did, and each line's time is
  // within kProgressPoll of its writing.
  void wait_for_writes() {
    inotify_.async_read_some(asio::buffer(events_), [this](auto error, std::size_t bytes) {
      if (error || stopped_) return;
      if (!names_progress(bytes)) {
        wait_for_writes();
        return;
      }
      read_progress(now());
      check();
      if (stopped_) return;
      poll_timer_.expires_after(kProgressPoll);
      poll_timer_.async_wait([this](auto error) {
        if (error || stopped_) return;
        // What came during the pause; events queued meanwhile are read (and this read again)
        // next, so nothing written is left unread.
        read_progress(now());
        check();
        if (!stopped_) wait_for_writes();
      });
    });
  }

  // Whether one of the inotify events read names the progress file (the directory's other files,
  // the checkpoint's among them, do not concern this part). A queue overflow counts as a write.
  bool names_progress(std::size_t bytes) const {
    for (std::size_t at = 0; at + sizeof(inotify_event) <= bytes;) {
      const auto* event = reinterpret_cast<const inotify_event*>(events_.data() + at);
      if ((event->mask & IN_Q_OVERFLOW) || (event->len && progress_name_ == event->name)) {
        return true;
      }
      at += sizeof(inotify_event) + event->len;
    }
    return false;
  }

  // Without inotify: reads the file every kProgressPoll.
  void poll() {
    if (stopped_ || guards_plan_.progress_path.empty()) return;
    read_progress(now());
    check();
    poll_timer_.expires_after(kProgressPoll);
    poll_timer_.async_wait([this](auto error) {
      if (!error) poll();
    });
  }

  void read_progress(TimePoint at) {
    std::string bytes = file_.read_new();
    if (bytes.empty()) return;
    Money spend = meter_.spend_at(at);
    std::int64_t oversized_before = lines_.oversized();
    bool good = false;
    for (const std::string& line : lines_.feed(bytes)) {
      std::optional<ProgressLine> parsed = parse_progress_line(line);
      // Bounded as kept with the run (RunLastProgress), not as read (up to 64 KiB).
      if (parsed) state_.last_line = printable_excerpt(line, kLastProgressChars);
      good = good || parsed;
      state_.apply(parsed, at, spend);
    }
    if (good) {
      progress_live_ = LiveProgress{
          HeartbeatProgress{RunLastProgress{state_.step, state_.total_steps, state_.last_line},
                            state_.metric_name, state_.metric_value,
                            progress_tracker(guards_plan_, state_)},
          steps_done_at(state_)};
    }
    state_.bad_lines += lines_.oversized() - oversized_before;
    new_lines_ = true;
  }

  // Asks each guard and acts, then sleeps until the next moment a verdict can change without a
  // new line: the stall guard's deadline, or the progress line held back by kProgressLineEvery.
  // The projection and burn-rate guards change only with a line (or once, at the first check).
  void check() {
    if (stopped_) return;
    TimePoint at = now();
    if (new_lines_ && (!last_summary_ || at - *last_summary_ >= kProgressLineEvery)) {
      reporter_.line(progress_summary(state_, plan_.currency));
      last_summary_ = at;
      new_lines_ = false;
    }
    GuardView view{at,
                   *meter_.launched_at(),
                   meter_.spend_at(at),
                   plan_.rate_per_hour,
                   plan_.run_budget,
                   guards_plan_.progress_path.empty() ? nullptr : &state_,
                   plan_.currency};
    for (auto& guard : guards_) {
      GuardVerdict verdict = guard->check(view);
      if (verdict.act == GuardVerdict::Act::warn) reporter_.line(verdict.message);
      if (verdict.act != GuardVerdict::Act::stop) continue;
      if (plan_.mode == Mode::warn) {
        // Warn mode stops nothing; each guard's stop is said once.
        if (said_.insert(verdict.reason).second) {
          reporter_.line("warn mode: " + verdict.reason + " would stop the run now (" +
                         verdict.message + "); it goes on");
        }
        continue;
      }
      reporter_.line(verdict.message);
      trip_(Trip{TripKind::runaway, verdict.reason, 0});
      return;  // the trip called on_stopping
    }
    std::optional<TimePoint> next;
    if (guards_plan_.stall_after && !said_.count("runaway:stall")) {
      TimePoint since = state_.last_line_at ? *state_.last_line_at : *meter_.launched_at();
      next = std::max(at, since + *guards_plan_.stall_after);
    }
    if (new_lines_ && last_summary_) {
      TimePoint summary_at = *last_summary_ + kProgressLineEvery;
      next = next ? std::min(*next, summary_at) : summary_at;
    }
    if (!next) {
      timer_.cancel();
      return;
    }
    timer_.expires_at(*next);
    timer_.async_wait([this](auto error) {
      if (error || stopped_) return;
      read_progress(now());
      check();
    });
  }

  asio::steady_timer timer_;
  asio::steady_timer poll_timer_;
  asio::posix::stream_descriptor inotify_;
  int watch_ = -1;  // the progress directory's watch in inotify_
  alignas(inotify_event) std::array<char, 4096> events_{};
  std::string progress_name_;
  const Reporter& reporter_;
  const Meter& meter_;
  const RunTerms& plan_;
  const GuardPlan& guards_plan_;
  std::function<void(const Trip&)> trip_;
  std::optional<ProgressState>& progress_out_;
  std::optional<LiveProgress>& progress_live_;
  ProgressFile file_;
  ProgressLines lines_;
  ProgressState state_;
  std::vector<std::unique_ptr<RunGuard>> guards_;
  std::optional<TimePoint> last_summary_;
  std::set<std::string> said_;
  bool new_lines_ = false;
  bool stopped_ = false;
};

}  // namespace

static_assert(kMaxTrackerBytes == kMaxTrackerTagBytes, "a progress tracker id fits the tag");

static_assert(kMaxSecondsLeft == kMaxProgressSecondsLeft, "the ledger takes the ETA it is given");

HeartbeatProgress LiveProgress::at(TimePoint now) const {
  HeartbeatProgress out = last;
  if (finish_at) out.seconds_left = std::max(0.0, to_seconds(*finish_at - now));
  return out;
}

std::optional<std::string> progress_tracker(const GuardPlan& plan,
                                            const std::optional<ProgressState>& progress) {
  if (plan.tracker_tagged || !progress) return std::nullopt;
  return progress->tracker;
}

std::unique_ptr<RunPart> make_guard_part(asio::io_context& io, const Reporter& reporter,
                                         const Meter& meter, const RunTerms& terms,
                                         const GuardPlan& plan,
                                         std::function<void(const Trip&)> trip,
                                         std::optional<ProgressState>& progress_out,
                                         std::optional<LiveProgress>& progress_live) {
  return std::make_unique<GuardPart>(io, reporter, meter, terms, plan, std::move(trip),
                                     progress_out, progress_live);
}

}  // namespace spendcap
