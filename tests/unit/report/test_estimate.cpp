// The known figures, reproduced by the pure estimate functions.
#include <doctest/doctest.h>

#include <cmath>

#include "spendcap/report/estimate.hpp"

using namespace spendcap;

TEST_CASE("estimate: 0.8 s x 50,000 steps at 2.50/h is 11.111 h and 27.78") {
  StepEstimate e = estimate_from_steps(0.8, 50000, 1, 2.50);
  CHECK(e.wall_hours == doctest::Approx(11.1111).epsilon(1e-6));
  CHECK(e.cost == doctest::Approx(27.7778).epsilon(1e-6));
  // Four instances: the same wall time, four times the instance-hours and cost.
  StepEstimate four = estimate_from_steps(0.8, 50000, 4, 2.50);
  CHECK(four.wall_hours == doctest::Approx(e.wall_hours));
  CHECK(four.cost == doctest::Approx(4 * e.cost));
}

TEST_CASE("estimate: 1e9 params x 20e9 tokens at 750 TFLOP/s and mfu 0.4 is about 111 GPU-hours") {
  FlopsEstimate e = estimate_from_size(1e9, 20e9, 750, 0.4, 8, 2.0);
  CHECK(e.flops == doctest::Approx(1.2e20));
  CHECK(e.achieved_tflops == doctest::Approx(300));
  CHECK(e.accelerator_hours == doctest::Approx(111.111).epsilon(1e-5));
  CHECK(e.wall_hours == doctest::Approx(111.111 / 8).epsilon(1e-5));
  REQUIRE(e.cost);
  CHECK(*e.cost == doctest::Approx(222.222).epsilon(1e-5));
  CHECK_FALSE(estimate_from_size(1e9, 20e9, 750, 0.4, 8, std::nullopt).cost);
}

TEST_CASE("estimate: spot 1.10 with 6 interruptions per 100 h losing 0.5 h vs 6,000 on demand") {
  SpotEstimate e = estimate_spot(2000, 1.10, 3.00, 6, 0.5);
  CHECK(e.on_demand_cost == doctest::Approx(6000));
  CHECK(e.interruptions == doctest::Approx(120));
  CHECK(e.redone_hours == doctest::Approx(60));
  CHECK(e.spot_cost == doctest::Approx(2266));
}

TEST_CASE("estimate: reserved 0.62 vs on demand 1.00 breaks even at 62%") {
  ReservedEstimate e = estimate_reserved(0.62, 1.00);
  CHECK(e.break_even == doctest::Approx(0.62));
  CHECK(e.reserved_yearly == doctest::Approx(5431.2));
  REQUIRE(e.on_demand_at.size() == 3);
  CHECK(e.on_demand_at[0].on_demand_yearly == doctest::Approx(2628));
  CHECK(e.on_demand_at[1].on_demand_yearly == doctest::Approx(5256));
  CHECK(e.on_demand_at[2].on_demand_yearly == doctest::Approx(7884));
}

TEST_CASE("estimate: serving cost per million and per thousand predictions") {
  auto cents = [](double v) { return std::round(v * 100) / 100; };
  CHECK(cents(serving_cost_per_million(0.40, 900, 0.55)) == doctest::Approx(0.22));
  CHECK(cents(serving_cost_per_million(1.20, 1400, 0.45)) == doctest::Approx(0.53));
  CHECK(cents(serving_cost_per_million(4.00, 300, 0.45)) == doctest::Approx(8.23));
  CHECK(serving_cost_per_thousand(2.50, 40e6) == doctest::Approx(0.0015));
}

TEST_CASE("estimate --compare: a type with enough memory beats a cheaper one without") {
  // 7e9 params x 16 bytes = 112 GB of state.
  std::vector<GpuOffer> offers = {
      {"small-24gb", 0.50, 24, 150}, {"big-141gb", 3.50, 141, 990}, {"mid-80gb", 2.00, 80, 312}};
  std::vector<GpuChoice> choices = compare_gpus(offers, 7e9, 1e9, 16, 0, 0.4);
  REQUIRE(choices.size() == 3);
  for (size_t i = 1; i < choices.size(); ++i) CHECK(choices[i - 1].cost <= choices[i].cost);
  for (const GpuChoice& c : choices) {
    if (c.offer.name == "small-24gb") {
      CHECK(c.gpus == 5);
      CHECK_FALSE(c.fits_one);
    }
    if (c.offer.name == "mid-80gb") CHECK(c.gpus == 2);
    if (c.offer.name == "big-141gb") CHECK(c.fits_one);
  }
  // The small one is cheapest per GPU-hour of work but cannot hold the model on one GPU.
  CHECK(choices.front().offer.name == "small-24gb");
  const GpuChoice* pick = recommended(choices);
  REQUIRE(pick);
  CHECK(pick->offer.name == "big-141gb");
  // Negative control: with a small model every type fits, and the cheapest is chosen.
  std::vector<GpuChoice> small = compare_gpus(offers, 1e9, 1e9, 16, 0, 0.4);
  CHECK(recommended(small)->offer.name == small.front().offer.name);
}
