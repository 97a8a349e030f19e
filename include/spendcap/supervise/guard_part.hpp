// The runaway guards as a part of the run (run_part.hpp): it reads the new lines of the progress
// file ($SPENDCAP_PROGRESS, in the run directory; bounded reads, a huge line cut) when the job
// writes it (inotify on the run directory from kWatchProgressAfter on; a write within
// kProgressPoll of another is read with it; without inotify, every kProgressPoll), each line timed
// as it is read (the projection's pace); after each read it asks each guard (guards/run_guard.hpp)
// and acts: a warning is printed, a stop goes through the supervisor's trip. Between writes it
// sleeps until a verdict can change by time alone (the stall guard's deadline), so an idle run
// costs it no wakeup. It prints what the progress says (cost per step, per 1000 units, the
// projected total) when new lines came, at most every kProgressLineEvery, and once at the end.
// Called from the event loop only.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>

#include "spendcap/base/duration.hpp"
#include "spendcap/base/money.hpp"
#include "spendcap/guards/progress.hpp"
#include "spendcap/ledger/ledger.hpp"
#include "spendcap/spend/trip.hpp"
#include "spendcap/supervise/respawn_part.hpp"
#include "spendcap/supervise/run_terms.hpp"

namespace spendcap {

class Meter;
class Reporter;
class RunPart;

// Progress lines on stderr at most this often: a job that reports every step must not flood it.
inline constexpr Nanos kProgressLineEvery = std::chrono::seconds(10);
// A line's time is when it was read, within this of when it was written: writes that follow one
// another closer than this are read together (and without inotify, the file is read this often).
inline constexpr Nanos kProgressPoll = std::chrono::milliseconds(50);
// Lines written in a run's first second are read at its end, or this long after the launch,
// whichever comes first; from then on within kProgressPoll (GuardPart::on_launched says why).
inline constexpr Nanos kWatchProgressAfter = std::chrono::seconds(1);

struct BurnRateCheck {
  double factor = 2.0;
  Money expected_per_hour;
  std::string experiment;
};

// What the run's guards are, decided by `spendcap run` from flags and the policy.
struct GuardPlan {
  std::string progress_path;         // $SPENDCAP_PROGRESS ("": no progress channel)
  std::optional<Nanos> stall_after;  // --stall-after / guards.stall.after
  bool require_fit = false;          // --require-fit
  std::optional<BurnRateCheck> burn_rate;
  std::optional<RespawnPlan> respawn;  // the respawn-loop guard (respawn_part.hpp)
  // The run has a tag `tracker` from admission (--tag tracker=..., or MLFLOW_RUN_ID and the like
  // in its environment): it is kept, and a tracker id the progress channel reports is not sent
  // to the ledger (HeartbeatProgress::tracker) nor put in the end webhooks.
  bool tracker_tagged = false;
};

// The tracker id a run's ledger row and end webhooks take from what its progress channel said:
// none when the run was tagged at admission (GuardPlan::tracker_tagged) or no line named one.
std::optional<std::string> progress_tracker(const GuardPlan& plan,
                                            const std::optional<ProgressState>& progress);

// What the heartbeats send of the progress channel while the run runs (HeartbeatPart::Hooks):
// its last good line and metric, and when its steps are expected to be done at its pace
// (steps_done_at; none: not known). The time left is taken from that at each heartbeat (at()), so
// one with no new line sends nothing and the ledger's ETA, a time, stays right.
struct LiveProgress {
  HeartbeatProgress last;  // its seconds_left unset
  std::optional<TimePoint> finish_at;
  bool operator==(const LiveProgress&) const = default;
  // `last` with the seconds from `now` to finish_at (0 once past it).
  HeartbeatProgress at(TimePoint now) const;
};

// `trip` stops the run (the supervisor's single trip); `progress_out` receives what the progress
// file said, at the end, when it said anything; `progress_live` its last good line, metric and
// expected end as they are read (for the heartbeats).
std::unique_ptr<RunPart> make_guard_part(boost::asio::io_context& io, const Reporter& reporter,
                                         const Meter& meter, const RunTerms& terms,
                                         const GuardPlan& plan,
                                         std::function<void(const Trip&)> trip,
                                         std::optional<ProgressState>& progress_out,
                                         std::optional<LiveProgress>& progress_live);

}  // namespace spendcap
