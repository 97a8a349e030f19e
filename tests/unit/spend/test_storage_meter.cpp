#include <doctest/doctest.h>

#include "spendcap/spend/meter.hpp"
#include "spendcap/spend/trip.hpp"

using namespace spendcap;
using namespace std::chrono;

namespace {
const TimePoint kStart = TimePoint(hours(2000));
const Money kPerGbMonth{2592000000000};  // 2,592,000 per GB-month: 1.00 per GB-second
}  // namespace

TEST_CASE("storage: GB x price x time, left rectangles, a 30-day month") {
  CHECK(storage_micros(kPerGbMonth, 1.0, seconds(1)) == doctest::Approx(1e6));
  CHECK(storage_micros(Money{1000000}, 1.0, hours(24 * 30)) == doctest::Approx(1e6));
  CHECK(storage_rate_per_hour(kPerGbMonth, 2.0).micros == 7200000000);

  Meter meter(Money{0});
  meter.charge_storage(kPerGbMonth, 4.0);
  meter.launched(kStart);
  CHECK_FALSE(meter.storage_spend_at(kStart + seconds(1)));  // not sampled yet: not measured
  CHECK_FALSE(meter.storage_peak_gb());
  meter.storage_sampled(kStart, 0.0);
  CHECK(meter.storage_spend_at(kStart + seconds(5))->micros == 0);
  meter.storage_sampled(kStart + seconds(10), 2.0);  // 0 GB held 10 s: nothing
  CHECK(meter.storage_spend_at(kStart + seconds(10))->micros == 0);
  // 2 GB from 10 s to 15 s, the last size held until now.
  CHECK(meter.storage_spend_at(kStart + seconds(15))->micros == 10000000);
  meter.storage_sampled(kStart + seconds(20), 1.0);  // 2 GB x 10 s
  CHECK(meter.storage_spend_at(kStart + seconds(20))->micros == 20000000);
  meter.tree_empty(kStart + seconds(30));  // 1 GB x 10 s more, then frozen
  CHECK(meter.storage_spend_at(kStart + seconds(90))->micros == 30000000);
  CHECK(meter.spend_at(kStart + seconds(90)).micros == 30000000);
  CHECK(*meter.storage_peak_gb() == doctest::Approx(2.0));
}

TEST_CASE(
    "storage: above the declared maximum it is charged as the maximum, so the allocated "
    "rate bounds the spend") {
  Money compute{36000000};
  Meter meter(compute);
  meter.charge_storage(kPerGbMonth, 1.0);
  meter.launched(kStart);
  meter.storage_sampled(kStart, 3.0);
  Money allocated = compute + storage_rate_per_hour(kPerGbMonth, 1.0);
  for (int s : {1, 7, 60, 3600}) {
    TimePoint at = kStart + seconds(s);
    CHECK(meter.spend_at(at) <= cost_of(allocated, at - kStart));
    CHECK(meter.storage_spend_at(at)->micros == static_cast<int64_t>(s) * 1000000);
  }
  CHECK(*meter.storage_peak_gb() == doctest::Approx(3.0));  // the peak is what was measured

  Meter none(compute);  // no --checkpoint-dir: the spend is the burn rate's alone
  none.launched(kStart);
  none.storage_sampled(kStart, 5.0);
  CHECK_FALSE(none.storage_spend_at(kStart + seconds(10)));
  CHECK(none.spend_at(kStart + seconds(10)).micros == 100000);
}
