#include <doctest/doctest.h>

#include "spendcap/guards/crash_loop.hpp"
#include "spendcap/guards/progress.hpp"
#include "spendcap/guards/respawn_loop.hpp"
#include "spendcap/guards/run_guard.hpp"

using namespace spendcap;
using namespace std::chrono;

namespace {
const TimePoint kLaunch = TimePoint(hours(1000));

PastRun failed_at(double at) {
  PastRun run;
  run.ended = PastRun::Ended::failed;
  run.started_at = at - 1;
  run.finished_at = at;
  return run;
}
}  // namespace

TEST_CASE("progress lines: known fields read, bad lines refused whole") {
  auto line = parse_progress_line(
      R"({"step":1200,"total_steps":50000,"metric":{"val_acc":0.83},"units":40960,"egress_gb":0.5})");
  REQUIRE(line);
  CHECK(*line->step == 1200);
  CHECK(*line->total_steps == 50000);
  CHECK(*line->metric_name == "val_acc");
  CHECK(*line->metric_value == doctest::Approx(0.83));
  CHECK(*line->units == doctest::Approx(40960));
  CHECK(*line->egress_gb == doctest::Approx(0.5));
  CHECK_FALSE(parse_progress_line("not json"));
  CHECK_FALSE(parse_progress_line(R"({"step":"twelve"})"));
  CHECK_FALSE(parse_progress_line(R"({"step":-1})"));
  CHECK_FALSE(parse_progress_line(R"({"metric":{}})"));
  CHECK_FALSE(parse_progress_line(R"({"other":1})"));
  CHECK_FALSE(parse_progress_line("[1,2]"));
}

TEST_CASE("progress lines: split across reads, a huge line cut without being held") {
  ProgressLines lines(16);
  CHECK(lines.feed("{\"step\":1}\n{\"st").size() == 1);
  auto rest = lines.feed("ep\":2}\n");
  REQUIRE(rest.size() == 1);
  CHECK(rest[0] == "{\"step\":2}");
  CHECK(lines.feed(std::string(40, 'x')).empty());
  CHECK(lines.feed(std::string(40, 'y')).empty());
  auto after = lines.feed("z\n{\"step\":3}\n");
  REQUIRE(after.size() == 1);  // the cut line's tail is skipped up to its newline
  CHECK(after[0] == "{\"step\":3}");
  CHECK(lines.oversized() == 1);
}

TEST_CASE("cost per step, per 1000 units and the projection; nothing where not reported") {
  ProgressState state;
  CHECK_FALSE(cost_per_step(state));
  CHECK_FALSE(projected_total(state));
  ProgressLine line;
  line.step = 100;
  line.units = 3200;
  state.apply(line, kLaunch + seconds(10), Money{100000});  // $0.10 after 100 steps
  CHECK(*cost_per_step(state) == doctest::Approx(0.001));
  CHECK(*cost_per_thousand_units(state) == doctest::Approx(0.1 / 3.2));
  CHECK_FALSE(projected_total(state));  // no total_steps yet
  line.total_steps = 1000;
  state.apply(line, kLaunch + seconds(10), Money{100000});
  CHECK_FALSE(projected_total(state));  // one step seen: no pace yet
  line.step = 200;
  state.apply(line, kLaunch + seconds(15), Money{150000});  // 100 steps for $0.05 since
  // $0.15 so far + $0.0005 x 800 steps left; the average ($0.15 / 200 x 1000) would say $0.75.
  CHECK(projected_total(state)->micros == 550000);
  state.apply(std::nullopt, kLaunch + seconds(11), Money{110000});
  CHECK(state.bad_lines == 1);
  CHECK(state.good_lines == 3);
}

TEST_CASE("seconds left: the steps to go at the recent pace, bounded; none without a pace") {
  ProgressState state;
  CHECK_FALSE(seconds_left(state));
  CHECK_FALSE(steps_done_at(state));
  ProgressLine line;
  line.step = 100;
  state.apply(line, kLaunch + seconds(10), Money{100000});
  CHECK_FALSE(seconds_left(state));  // no total
  line.total_steps = 1000;
  state.apply(line, kLaunch + seconds(10), Money{100000});
  CHECK_FALSE(seconds_left(state));  // one step seen: no pace yet
  line.step = 200;
  state.apply(line, kLaunch + seconds(15), Money{150000});  // 100 steps in 5 s: 20 a second
  REQUIRE(seconds_left(state));
  CHECK(*seconds_left(state) == doctest::Approx(800.0 / 20));
  REQUIRE(steps_done_at(state));
  CHECK(*steps_done_at(state) == kLaunch + seconds(15) + seconds(40));
  // Done: 0 left, whatever the pace.
  line.step = 1000;
  state.apply(line, kLaunch + seconds(16), Money{160000});
  CHECK(*seconds_left(state) == 0.0);
  // A crawl (1 step in 10 s, a billion to go) is bounded at 30 days.
  ProgressState crawl;
  line.total_steps = 1'000'000'000;
  line.step = 1;
  crawl.apply(line, kLaunch, Money{});
  line.step = 2;
  crawl.apply(line, kLaunch + seconds(10), Money{});
  CHECK(*seconds_left(crawl) == kMaxSecondsLeft);
  CHECK(kMaxSecondsLeft == 30.0 * 86400);
}

TEST_CASE("projection: the start-up before the first step is not counted; a resumed run") {
  // Issue 24: 20 s of imports at $0.01/s, then 1000 steps at $0.0002 each. The old projection
  // (spend / step x total) said $0.21 / 5 x 1000 = $42 at step 5.
  ProgressState state;
  ProgressLine line;
  line.total_steps = 1000;
  line.step = 1;
  state.apply(line, kLaunch + seconds(20), Money{200200});
  CHECK_FALSE(projected_total(state));
  line.step = 5;
  state.apply(line, kLaunch + seconds(21), Money{201000});
  CHECK(projected_total(state)->micros == 201000 + 200 * 995);
  // Resumed at step 40000 of 50000: priced from here, not as if 40000 steps were done here.
  ProgressState resumed;
  line.total_steps = 50000;
  line.step = 40000;
  resumed.apply(line, kLaunch + seconds(5), Money{50000});
  line.step = 40100;
  resumed.apply(line, kLaunch + seconds(6), Money{60000});
  CHECK(projected_total(resumed)->micros == 60000 + 100 * 9900);
  // Steps seen twice at one value: still no pace.
  ProgressState same;
  line.step = 7;
  same.apply(line, kLaunch, Money{1000});
  same.apply(line, kLaunch + seconds(1), Money{2000});
  CHECK_FALSE(projected_total(same));
}

TEST_CASE("projection: one line per step, each timed as read; a pace that changes") {
  // Issue 30: $0.01 a second, 10 lines a second read every 50 ms, 300 steps. Timed by the
  // sampling interval (every line of a second at one moment) the projection said $0.01 at step 9.
  auto spend_at = [](double t) { return Money{static_cast<std::int64_t>(t * 10000)}; };
  ProgressState state;
  ProgressLine line;
  line.total_steps = 300;
  std::int64_t step = 0;
  auto read_until = [&](double from, double to, double lines_per_second, double since) {
    for (double t = from; t <= to + 1e-9; t += 0.05) {
      auto due = static_cast<std::int64_t>((t - since) * lines_per_second + 1e-6);
      while (step < due) {
        line.step = ++step;
        state.apply(line,
                    kLaunch + std::chrono::duration_cast<Nanos>(std::chrono::duration<double>(t)),
                    spend_at(t));
      }
    }
  };
  read_until(2.0, 2.5, 10, 2.0);        // 2 s of start-up, then 5 steps in 0.5 s
  CHECK_FALSE(projected_total(state));  // under a second of lines: no pace yet
  read_until(2.55, 8.0, 10, 2.0);       // step 60 at 8 s: $0.08, 240 steps left at $0.001
  REQUIRE(projected_total(state));
  CHECK(projected_total(state)->micros == doctest::Approx(80000 + 240 * 1000).epsilon(0.02));
  // Then 2 lines a second: after a window (5 s, a quarter of the time since the first step at
  // least), the steps left are priced at $0.005 each, not at the average since the first line.
  double since = 8.0 - 60 / 2.0;  // step 60 at 8 s on the new schedule
  read_until(8.05, 16.0, 2, since);
  REQUIRE(projected_total(state));
  CHECK(*state.step == 76);
  CHECK(projected_total(state)->micros ==
        doctest::Approx(160000 + (300 - 76) * 5000).epsilon(0.03));
  // What is kept stays small: the window and one sample before it, a few a second.
  CHECK(state.pace.size() < 40);
}

TEST_CASE("unit prices and money: fixed-point, enough digits, never an exponent") {
  CHECK(format_unit_cost(4.617e-05) == "$0.00004617");
  CHECK(format_unit_cost(2.2e-05) == "$0.000022");
  CHECK(format_unit_cost(0.0012) == "$0.0012");
  CHECK(format_unit_cost(0.5) == "$0.5000");
  CHECK(format_unit_cost(1234.5) == "$1234.50");
  CHECK(format_unit_cost(0) == "$0.00");
  CHECK(format_unit_cost(3.1e-9) == "$0.0000000031");  // trailing zeros trimmed
  CHECK(format_unit_cost(4.617e-05, "EUR") == "0.00004617 EUR");
  CHECK(format_money(Money{22}) == "$0.000022");
  CHECK(format_money(Money{0}) == "$0.00");
  CHECK(format_money(Money{70000}) == "$0.07");
  CHECK(format_money(Money{36000000}) == "$36.00");
  CHECK(format_money(Money{-1500000}) == "-$1.50");
  for (double x : {1e-12, 7.5e-7, 3.3e-5, 0.04, 9.99, 1e6}) {
    CHECK(format_unit_cost(x).find('e') == std::string::npos);
  }
}

TEST_CASE("projection guard: warns once, or stops with --require-fit") {
  ProgressState state;
  ProgressLine line;
  line.step = 100;
  line.total_steps = 1000;
  line.step = 0;
  state.apply(line, kLaunch + seconds(5), Money{});
  line.step = 100;
  state.apply(line, kLaunch + seconds(10), Money{100000});  // projected $1.00
  GuardView view{kLaunch + seconds(10), kLaunch,       Money{100000},
                 Money{36000000},       Money{500000}, &state};
  auto warn = make_projection_guard(false);
  auto first = warn->check(view);
  CHECK(first.act == GuardVerdict::Act::warn);
  CHECK(first.message.find("$1.00") != std::string::npos);
  CHECK(warn->check(view).act == GuardVerdict::Act::none);
  auto stop = make_projection_guard(true)->check(view);
  CHECK(stop.act == GuardVerdict::Act::stop);
  CHECK(stop.reason == "runaway:will-not-fit");
  view.run_budget = Money{2000000};  // fits: nothing
  CHECK(make_projection_guard(true)->check(view).act == GuardVerdict::Act::none);
}

TEST_CASE("stall guard: from launch, then from the last line") {
  ProgressState state;
  auto guard = make_stall_guard(seconds(30));
  GuardView view{kLaunch + seconds(29), kLaunch, Money{}, Money{36000000}, std::nullopt, &state};
  CHECK(guard->check(view).act == GuardVerdict::Act::none);
  view.now = kLaunch + seconds(30);
  CHECK(guard->check(view).reason == "runaway:stall");
  ProgressLine line;
  line.step = 1;
  state.apply(line, kLaunch + seconds(25), Money{});
  view.now = kLaunch + seconds(54);
  CHECK(guard->check(view).act == GuardVerdict::Act::none);
  view.now = kLaunch + seconds(55);
  CHECK(guard->check(view).act == GuardVerdict::Act::stop);
}

TEST_CASE("burn-rate guard: above factor x expected warns once") {
  GuardView view{kLaunch, kLaunch, Money{}, Money{32000000}, std::nullopt, nullptr};
  auto guard = make_burn_rate_guard(2.0, Money{4000000}, "bert");
  auto verdict = guard->check(view);
  CHECK(verdict.act == GuardVerdict::Act::warn);
  CHECK(verdict.message.find("bert") != std::string::npos);
  CHECK(guard->check(view).act == GuardVerdict::Act::none);
  view.rate_per_hour = Money{8000000};  // exactly 2 x: not above
  CHECK(make_burn_rate_guard(2.0, Money{4000000}, "bert")->check(view).act ==
        GuardVerdict::Act::none);
}

TEST_CASE("crash loop: N failures in the window with no success since refuse") {
  const double now = 100000;
  const Nanos window = minutes(10);
  std::vector<PastRun> history;
  for (int i = 0; i < 4; ++i) history.push_back(failed_at(now - 100 + i));
  CHECK_FALSE(decide_crash_loop(history, now, 5, window, false).refuse);
  history.push_back(failed_at(now - 10));
  auto verdict = decide_crash_loop(history, now, 5, window, false);
  CHECK(verdict.refuse);
  CHECK(verdict.failures == 5);
  CHECK(verdict.send_refused_event);
  // The refusal recorded: the next one in the window sends no event.
  PastRun refusal;
  refusal.started_at = refusal.finished_at.emplace(now - 5);
  refusal.crash_loop_refusal = true;
  history.push_back(refusal);
  auto again = decide_crash_loop(history, now, 5, window, false);
  CHECK(again.refuse);
  CHECK_FALSE(again.send_refused_event);
  // A success after them resets the count.
  PastRun success;
  success.ended = PastRun::Ended::succeeded;
  success.started_at = now - 4;
  success.finished_at = now - 3;
  history.push_back(success);
  CHECK_FALSE(decide_crash_loop(history, now, 5, window, false).refuse);
}

TEST_CASE("crash loop: the refusal says until when, and a cleared run restarts the count") {
  const double now = 1'000'000;  // 1970-01-12 13:46:40 UTC
  std::vector<PastRun> history;
  // Failures 300, 200, 100 and 50 s ago; the limit is 3: it lifts when the one 200 s ago (the
  // third newest) leaves the 10m window, 400 s from now.
  for (double ago : {300.0, 200.0, 100.0, 50.0}) history.push_back(failed_at(now - ago));
  auto verdict = decide_crash_loop(history, now, 3, minutes(10), false);
  REQUIRE(verdict.refuse);
  REQUIRE(verdict.refused_until);
  CHECK(*verdict.refused_until == doctest::Approx(now + 400));
  CHECK(verdict.message.find("refused until 1970-01-12 13:53:20 UTC") != std::string::npos);
  CHECK(verdict.message.find("--clear-crash-loop") != std::string::npos);
  // Started with --clear-crash-loop 10 s ago: only what came after it counts.
  PastRun cleared;
  cleared.ended = PastRun::Ended::running;
  cleared.started_at = now - 10;
  cleared.cleared = true;
  history.push_back(cleared);
  auto after = decide_crash_loop(history, now, 3, minutes(10), false);
  CHECK_FALSE(after.refuse);
  CHECK(after.failures == 0);
  // Negative control: the same run without the mark changes nothing.
  history.back().cleared = false;
  CHECK(decide_crash_loop(history, now, 3, minutes(10), false).refuse);
}

TEST_CASE("crash loop: failures outside the window and other endings do not count") {
  const double now = 100000;
  std::vector<PastRun> history;
  for (int i = 0; i < 5; ++i) history.push_back(failed_at(now - 700 - i));  // 11+ minutes ago
  CHECK_FALSE(decide_crash_loop(history, now, 5, minutes(10), false).refuse);
  std::vector<PastRun> stopped;
  for (int i = 0; i < 9; ++i) {
    PastRun run = failed_at(now - 10 - i);
    run.ended = PastRun::Ended::other;  // killed, stopped, preempted, refused
    stopped.push_back(run);
  }
  CHECK_FALSE(decide_crash_loop(stopped, now, 5, minutes(10), false).refuse);
}

TEST_CASE("retry back-off: 10s doubling, capped at 5m, from the last failure") {
  CHECK(retry_backoff(0) == Nanos{});
  CHECK(retry_backoff(1) == seconds(10));
  CHECK(retry_backoff(2) == seconds(20));
  CHECK(retry_backoff(5) == seconds(160));
  CHECK(retry_backoff(6) == minutes(5));
  CHECK(retry_backoff(60) == minutes(5));
  const double now = 100000;
  std::vector<PastRun> history = {failed_at(now - 4), failed_at(now - 3)};
  auto verdict = decide_crash_loop(history, now, 5, minutes(10), true);
  CHECK_FALSE(verdict.refuse);
  CHECK(verdict.backoff > seconds(16));
  CHECK(verdict.backoff <= seconds(17));
  CHECK(decide_crash_loop(history, now, 5, minutes(10), false).backoff == Nanos{});
}

TEST_CASE("respawn tracker: restarts after abnormal exits only, more than N in the window") {
  const TimePoint t0 = TimePoint(hours(1000));
  RespawnTracker tracker(10, minutes(5));
  std::string crash = respawn_key("/usr/bin/python3", "python3 crash.py", 42);
  std::string healthy = respawn_key("/usr/bin/python3", "python3 worker.py", 42);
  int restarts = 0;
  tracker.started(crash, t0);  // the first start is no restart
  for (int i = 1; i <= 11; ++i) {
    tracker.exited(crash, t0 + seconds(i), true);
    restarts = tracker.started(crash, t0 + seconds(i));
    CHECK(tracker.over(restarts) == (i > 10));
  }
  CHECK(restarts == 11);
  for (int i = 0; i < 50; ++i) {
    tracker.exited(healthy, t0 + seconds(i), false);
    CHECK(tracker.started(healthy, t0 + seconds(i)) == 0);
  }
  // Outside the window the old restarts no longer count.
  tracker.exited(crash, t0 + minutes(20), true);
  CHECK(tracker.started(crash, t0 + minutes(20)) == 1);
  // The fallback: a replacement counts when its predecessor lived less than the minimum life.
  RespawnTracker fallback(10, minutes(5));
  CHECK(fallback.replaced(crash, t0, seconds(11), seconds(10)) == 0);
  CHECK(fallback.replaced(crash, t0, seconds(1), seconds(10)) == 1);
}
