// The ledger's side of reports on SQLite: runs of a period streamed with what a report reads, and
// accepted results (schema migration "v6", issue 11).
#include <doctest/doctest.h>

#include "ledger/ledger_conformance.hpp"
#include "spendcap/ledger/ledger_store.hpp"
#include "spendcap/ledger/sqlite/sqlite_ledger.hpp"
#include "spendcap/report/report.hpp"
#include "test_support.hpp"

using namespace spendcap;
using namespace spendcap::testing;

TEST_CASE("SqliteLedger: runs of a period are streamed; accepted results are kept") {
  TempDir dir;
  SqliteLedger ledger(dir.file("ledger.db"), {});
  for (const char* id : {"r1", "r2", "r3"}) {
    RunStart run = run_start(id, "vision", usd(1));
    run.budget = usd(10);
    run.experiment = "resnet";
    REQUIRE(ledger.begin_run(run).admitted);
  }
  ledger.finish_run(run_final("r1", usd(0.5)));
  ledger.finish_run(run_final("r2", usd(0.25), RunStatus::killed));

  std::vector<RunRecord> seen;
  ledger.for_each_run_started(0, 1e18, [&](const RunRecord& run) { seen.push_back(run); });
  REQUIRE(seen.size() == 3);
  ReportOptions options;
  options.by = {*parse_group_by("experiment")};
  ReportBuilder builder(options);
  for (const RunRecord& run : seen) {
    CHECK(run.team == "vision");
    CHECK(run.tags.at("slurm_job_id") == "17");
    builder.add(report_row_of(run));
  }
  Report report = std::move(builder).finish();
  REQUIRE(report.groups.size() == 1);
  CHECK(report.total.spend == usd(0.75));
  CHECK(report.total.running == 1);
  CHECK(report.total.waste == usd(0.25));

  // The period: nothing started before 1970-01-02.
  int none = 0;
  ledger.for_each_run_started(0, 86400, [&](const RunRecord&) { ++none; });
  CHECK(none == 0);

  AcceptedResult accepted = ledger.accept_run("r1", "the one we ship", "ana@host");
  CHECK(accepted.accepted_at > 0);
  ledger.accept_run("r1", "still the one", "ana@host");  // replaces the note
  std::vector<AcceptedResult> results = ledger.accepted_results();
  REQUIRE(results.size() == 1);
  CHECK(results[0].run_id == "r1");
  CHECK(results[0].note == "still the one");
  // A running run has no result yet; an unknown one is refused.
  CHECK_THROWS_WITH_AS(ledger.accept_run("r3", "", "ana@host"), doctest::Contains("still running"),
                       Error);
  CHECK_THROWS_WITH_AS(ledger.accept_run("nope", "", "ana@host"), doctest::Contains("no such run"),
                       Error);
  CHECK(ledger.accepted_results().size() == 1);
}
