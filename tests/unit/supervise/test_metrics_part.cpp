#include <doctest/doctest.h>

#include "spendcap/supervise/metrics_part.hpp"

using namespace spendcap;

TEST_CASE("metrics: label values escaped as the exposition format asks") {
  CHECK(prometheus_label_value("plain") == "plain");
  CHECK(prometheus_label_value("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
}

TEST_CASE("metrics: a run's file carries what was measured, and nothing else") {
  RunMetrics m;
  m.run_id = "r1";
  m.team = "vision";
  m.experiment = "x\"y";
  m.spend = Money{1'500'000};
  m.ceiling = Money{2'000'000};
  m.rate_per_hour = Money{36'000'000};
  std::string text = run_metrics_text(m);
  CHECK(text.find("spendcap_run_spend_usd{run_id=\"r1\",team=\"vision\",experiment=\"x\\\"y\","
                  "currency=\"USD\"} 1.500000\n") != std::string::npos);
  CHECK(text.find("spendcap_run_burn_rate_usd_per_hour{") != std::string::npos);
  CHECK(text.find("# TYPE spendcap_run_ceiling_usd gauge\n") != std::string::npos);
  // Not measured: left out, never 0.
  CHECK(text.find("budget") == std::string::npos);
  CHECK(text.find("utilisation") == std::string::npos);
  CHECK(text.find("energy") == std::string::npos);
  m.budget = Money{5'000'000};
  m.gpu_utilisation = 0.8;
  m.energy_joules = 0;  // measured as 0: written
  text = run_metrics_text(m);
  CHECK(text.find("spendcap_run_budget_usd{") != std::string::npos);
  CHECK(text.find("spendcap_run_gpu_utilisation_ratio{") != std::string::npos);
  CHECK(text.find("} 0.80000000000000004\n") != std::string::npos);
  CHECK(text.find("spendcap_run_gpu_energy_joules{") != std::string::npos);
}

TEST_CASE("metrics: the team summary adds each run to what the file held") {
  std::string first = team_summary_text("", "vision", "USD", Money{1'250'000});
  CHECK(first.find("spendcap_team_runs_finished_total{team=\"vision\"} 1\n") != std::string::npos);
  CHECK(first.find("spendcap_team_spend_usd_total{team=\"vision\",currency=\"USD\"} 1.250000\n") !=
        std::string::npos);
  std::string second = team_summary_text(first, "vision", "USD", Money{2'000'001});
  CHECK(second.find("spendcap_team_runs_finished_total{team=\"vision\"} 2\n") != std::string::npos);
  CHECK(second.find("} 3.250001\n") != std::string::npos);
}

TEST_CASE("metrics: file names keep only safe bytes") {
  CHECK(run_metrics_file("3f2a-11") == "spendcap_3f2a-11.prom");
  CHECK(team_metrics_file("a/b c") == "spendcap_team_a%2Fb%20c.prom");
  CHECK(team_metrics_file("") == "spendcap_team_.prom");
}
