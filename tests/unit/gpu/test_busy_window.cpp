#include <doctest/doctest.h>

#include "spendcap/gpu/busy_window.hpp"

namespace spendcap {

namespace {
constexpr unsigned long long kS = 1'000'000;  // a second in microseconds
}

TEST_CASE("busy window: another tenant's sample never dilutes the run's") {
  // The case: the run at 8% next to another process at 90%, each with its own timestamp
  // in the same driver sample. Averaging over timestamps read ~4% (under the idle threshold).
  BusyWindow w =
      process_busy({{10, 100 * kS + kS, 8}, {99, 100 * kS + kS, 90}}, {}, {10}, 100 * kS);
  CHECK(w.fresh);
  CHECK(w.others);
  CHECK(w.measured_seconds == doctest::Approx(1));
  CHECK(w.busy_seconds == doctest::Approx(0.08));
  CHECK(w.last_seen_us == 101 * kS);
}

TEST_CASE("busy window: two of the run's pids add up, capped at 100%") {
  BusyWindow w = process_busy({{10, 2 * kS, 40}, {11, 2 * kS, 45}}, {}, {10, 11}, kS);
  CHECK(w.busy_seconds == doctest::Approx(0.85));
  w = process_busy({{10, 2 * kS, 70}, {11, 2 * kS, 60}}, {}, {10, 11}, kS);
  CHECK(w.busy_seconds == doctest::Approx(1.0));
}

TEST_CASE("busy window: no entry while the device sampled is 0%, no sample at all unmeasured") {
  // Another tenant's sample (or the device's own) is fresher: the run had no non-zero sample.
  BusyWindow w = process_busy({{99, 3 * kS, 50}}, {}, {10}, kS);
  CHECK(w.measured_seconds == doctest::Approx(2));
  CHECK(w.busy_seconds == doctest::Approx(0));
  w = process_busy({}, {2 * kS, 3 * kS}, {10}, kS);
  CHECK(w.measured_seconds == doctest::Approx(2));
  CHECK(w.busy_seconds == 0);
  // NOT_FOUND and no device sample: unmeasured, neither busy nor idle; last_seen stays.
  w = process_busy({}, {}, {10}, kS);
  CHECK_FALSE(w.fresh);
  CHECK(w.measured_seconds == 0);
  CHECK(w.last_seen_us == kS);
  // Samples not newer than last_seen are not new.
  w = process_busy({{10, kS, 90}}, {kS}, {10}, kS);
  CHECK_FALSE(w.fresh);
}

TEST_CASE("busy window: a pid's older sample is 0% later; its newest speaks for the window") {
  // Device samples at 2, 3, 4 s. Pid 10's newest non-zero sample is at 2 s (then it idled); pid
  // 11's at 4 s (the driver no longer says what it did at 2 and 3 s: its newest stands for them).
  BusyWindow w =
      process_busy({{10, 2 * kS, 60}, {11, 4 * kS, 30}}, {2 * kS, 3 * kS, 4 * kS}, {10, 11}, kS);
  CHECK(w.measured_seconds == doctest::Approx(3));
  CHECK(w.busy_seconds == doctest::Approx(0.9 + 0.3 + 0.3));
  CHECK(w.last_seen_us == 4 * kS);
  // Alone, pid 10: 60% in (1, 2], then 0.
  w = process_busy({{10, 2 * kS, 60}}, {2 * kS, 3 * kS, 4 * kS}, {10}, kS);
  CHECK(w.measured_seconds == doctest::Approx(3));
  CHECK(w.busy_seconds == doctest::Approx(0.6));
}

TEST_CASE("busy window: each pid's own timestamp within one driver sample is that sample") {
  // Two of the run's pids, stamped 3 ms apart by the same driver sample: not an unknown segment.
  BusyWindow w = process_busy({{10, 2 * kS, 40}, {11, 2 * kS + 3000, 30}}, {}, {10, 11}, kS);
  CHECK(w.measured_seconds == doctest::Approx(1.003));
  CHECK(w.busy_seconds == doctest::Approx(0.7 * 1.003));
  CHECK(w.last_seen_us == 2 * kS + 3000);
}

TEST_CASE("busy window: device-level samples each cover the time since the previous one") {
  BusyWindow w = device_busy({{3 * kS, 100}, {2 * kS, 50}}, kS);
  CHECK(w.fresh);
  CHECK(w.measured_seconds == doctest::Approx(2));
  CHECK(w.busy_seconds == doctest::Approx(1.5));
  CHECK(w.last_seen_us == 3 * kS);
  w = device_busy({}, 3 * kS);
  CHECK_FALSE(w.fresh);
  CHECK(w.measured_seconds == 0);
}

}  // namespace spendcap
