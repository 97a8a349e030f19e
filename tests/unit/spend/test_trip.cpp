#include <doctest/doctest.h>

#include <sys/wait.h>

#include "spendcap/spend/meter.hpp"
#include "spendcap/spend/trip.hpp"

using namespace spendcap;
using namespace std::chrono;

namespace {
const TimePoint kLaunch = TimePoint(hours(1000));
const Money kRate{36000000};  // 0.01 per second
}  // namespace

TEST_CASE("the issue's example: 36/h, budget 0.10, grace 1s, kill-after 1s trips at 7s") {
  ShutdownTimes times{seconds(1), seconds(1)};
  Money reserve = shutdown_reserve(kRate, times);
  CHECK(reserve.micros == 30000);
  auto trip = budget_trip_time(kLaunch, kRate, Money{100000}, reserve);
  REQUIRE(trip);
  CHECK(*trip - kLaunch == seconds(7));
  Meter meter(kRate);
  meter.launched(kLaunch);
  CHECK(meter.spend_at(*trip).micros == 70000);
  // Grace and kill-after used in full, plus the reaping slack, end exactly at the budget.
  KillDeadlines deadlines =
      plan_kill(*trip, times, ceiling_reached_time(kLaunch, kRate, Money{100000}));
  CHECK(deadlines.term_at - kLaunch == seconds(8));
  CHECK(deadlines.kill_at - kLaunch == seconds(9));
  CHECK(meter.spend_at(deadlines.kill_at + kReapingSlack).micros == 100000);
}

TEST_CASE("a longer grace never pushes spend over the ceiling") {
  // A signal trip with 15 s of grace, 2 s before the ceiling would be reached.
  Money ceiling{100000};
  auto empty_by = ceiling_reached_time(kLaunch, kRate, ceiling);  // launch + 10 s
  TimePoint tripped = kLaunch + seconds(8);
  KillDeadlines deadlines = plan_kill(tripped, ShutdownTimes{seconds(15), seconds(5)}, empty_by);
  CHECK(deadlines.kill_at == *empty_by - kReapingSlack);
  CHECK(deadlines.term_at == tripped);  // too little time left for any grace
  // With room to spare the times are kept as given.
  KillDeadlines relaxed = plan_kill(kLaunch, ShutdownTimes{seconds(2), seconds(3)}, empty_by);
  CHECK(relaxed.term_at == kLaunch + seconds(2));
  CHECK(relaxed.kill_at == kLaunch + seconds(5));
}

TEST_CASE("a late timer does not move the deadlines: they run from the planned trip") {
  KillDeadlines deadlines =
      plan_kill(kLaunch + seconds(7), ShutdownTimes{seconds(1), seconds(1)}, std::nullopt);
  CHECK(deadlines.term_at == kLaunch + seconds(8));
  CHECK(deadlines.kill_at == kLaunch + seconds(9));
}

TEST_CASE("rate 0 never trips; a short ceiling trips at once") {
  CHECK_FALSE(budget_trip_time(kLaunch, Money{0}, Money{100}, Money{0}).has_value());
  CHECK(budget_trip_time(kLaunch, kRate, Money{20000}, Money{30000}) == kLaunch);
}

TEST_CASE("the meter accrues from launch until the tree is empty") {
  Meter meter(kRate);
  CHECK(meter.spend_at(kLaunch).micros == 0);
  meter.launched(kLaunch);
  CHECK(meter.spend_at(kLaunch + seconds(3)).micros == 30000);
  meter.tree_empty(kLaunch + seconds(4));
  CHECK(meter.spend_at(kLaunch + seconds(100)).micros == 40000);
  CHECK(meter.elapsed_at(kLaunch + seconds(100)) == seconds(4));
}

TEST_CASE("each threshold fires once, in order") {
  ThresholdTracker tracker({0.5, 0.8, 0.95});
  CHECK(tracker.crossed(Money{40}, Money{100}).empty());
  CHECK(tracker.crossed(Money{85}, Money{100}) == std::vector<double>{0.5, 0.8});
  CHECK(tracker.crossed(Money{90}, Money{100}).empty());
  CHECK(tracker.next() == 0.95);
  CHECK(tracker.crossed(Money{100}, Money{100}) == std::vector<double>{0.95});
  CHECK_FALSE(tracker.next().has_value());
}

TEST_CASE("exit codes of trips and of the command") {
  CHECK(exit_code_for(Trip{TripKind::budget, "budget:run", 0}) == ExitCode::budget);
  CHECK(exit_code_for(Trip{TripKind::stop_order, "stop-order", 0}) == ExitCode::runaway);
  CHECK(exit_code_for(Trip{TripKind::runaway, "runaway:idle-gpu", 0}) == ExitCode::runaway);
  CHECK(exit_code_for(Trip{TripKind::ledger_unreachable, "ledger-unreachable", 0}) ==
        ExitCode::ledger_unreachable);
  CHECK(to_int(exit_code_for(Trip{TripKind::signal, "signal:SIGTERM", 15})) == 143);
  CHECK(command_exit_status(3 << 8) == 3);  // exited 3
  CHECK(command_exit_status(9) == 137);     // killed by SIGKILL
}

TEST_CASE("a limited grant asks again a second before its trip, else at the sync interval") {
  const Nanos sync = seconds(5);
  CHECK(heartbeat_delay(sync, std::nullopt) == sync);      // granted in full, or tripped
  CHECK(heartbeat_delay(sync, seconds(30)) == sync);       // the trip is far: the usual heartbeat
  CHECK(heartbeat_delay(sync, seconds(3)) == seconds(2));  // kAskBeforeTrip before it
  CHECK(heartbeat_delay(sync, milliseconds(1500)) == milliseconds(500));
  // Within the last second the trip comes first: no burst of heartbeats.
  CHECK(heartbeat_delay(sync, milliseconds(900)) == sync);
  CHECK(heartbeat_delay(sync, Nanos{}) == sync);
}
