// ledger_bench: how fast the SQLite ledger is where it matters.
//
//   (a) heartbeats that raise the ceiling, from 1, 8 and 32 concurrent writer PROCESSES (each its
//       own connection, as concurrent `spendcap run`s are), for --seconds each: ops/s in total
//       and the latency of one heartbeat (p50, p99, max over all writers);
//   (b) `spendcap budgets` (Ledger::budgets) over a ledger of --runs finished runs (default
//       1,000,000) across 20 teams, 200 experiments, 10 projects and 100 users over 90 days,
//       every one of them budgeted: the median of several calls. Target: under 1 s.
//
// Usage: ledger_bench [--seconds N] [--runs N] [--dir DIR]   (DIR: where the ledgers are made;
// default a new directory under /tmp, removed afterwards).
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "spendcap/base/error.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/ledger/backends.hpp"
#include "spendcap/ledger/sqlite/sqlite_ledger.hpp"

namespace {

using namespace spendcap;
using SteadyClock = std::chrono::steady_clock;

double seconds_since(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

RunStart bench_run(const std::string& id, const std::string& team) {
  RunStart run;
  run.id = id;
  run.team = team;
  run.experiment = "bench";
  run.host = "bench";
  run.pid = getpid();
  run.rate_per_hour = Money{36'000'000};  // $36/h
  run.reserve = Money{110'000};           // 11 s of it
  run.shutdown = std::chrono::seconds(11);
  run.sync = std::chrono::seconds(5);
  run.want = Money{3'000'000};
  return run;
}

// What one writer measured, sent to the parent through a pipe.
struct WriterResult {
  std::int64_t operations = 0;
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
  int failed = 0;
};

// One writer process: its own connection and run; heartbeats, each asking for a higher ceiling,
// from `start_fd`'s go signal until `seconds` have passed.
// How the writers ask. `every`: each heartbeat raises the ceiling (the worst case, and what
// this bench measured before issue 23). `supervisor`: as the supervisor asks since issue 23 (a
// raise once what the ceiling has left falls below half a claim: at the default 5 s sync and
// 5 min claim horizon, one heartbeat in 30).
enum class Wants { every, supervisor };
struct Load {
  Wants wants = Wants::every;
  bool hot = false;  // every writer on one team budget (else four teams)
};

// --runner-ledger: the writers' url (a runner role's), when not the owner's.
std::string g_runner_url;

WriterResult writer(const std::string& path, int index, int start_fd, double seconds, Load load) {
  WriterResult result;
  try {
    std::string url = path;
    if (!g_runner_url.empty()) {
      url = g_runner_url + (g_runner_url.find('?') == std::string::npos ? "?" : "&") +
            path.substr(path.find("options="));
    }
    std::unique_ptr<Ledger> opened = open_ledger(url);  // a file, or a postgresql:// url
    Ledger& ledger = *opened;
    std::string id = "writer-" + std::to_string(getpid());
    std::string team = load.hot ? "team-0" : "team-" + std::to_string(index % 4);
    RunStart run = bench_run(id, team);
    // Heartbeats here come every millisecond, not every sync: a rate that can spend what they
    // report (a runner role's server checks spend against rate x its clock).
    run.rate_per_hour = Money{36'000'000'000};
    Admission admission = ledger.begin_run(run);
    if (!admission.admitted) throw std::runtime_error("refused: " + admission.refusal);
    char go;
    if (read(start_fd, &go, 1) != 1) throw std::runtime_error("no start signal");
    Money spend, ceiling = admission.grant.ceiling;
    std::vector<double> latencies_ms;
    auto start = SteadyClock::now();
    while (seconds_since(start) < seconds) {
      auto before = SteadyClock::now();
      spend += Money{1'000};
      // A claim of 60 heartbeats' spend: the supervisor raises when under half is left.
      Money claim{60'000};
      bool raise = load.wants == Wants::every || ceiling - spend < Money{claim.micros / 2};
      ceiling = ledger.heartbeat(id, spend, raise ? spend + claim : ceiling).ceiling;
      latencies_ms.push_back(seconds_since(before) * 1e3);
    }
    ledger.finish_run({id, RunStatus::succeeded, "exited", 0, spend, seconds});
    std::sort(latencies_ms.begin(), latencies_ms.end());
    result.operations = static_cast<std::int64_t>(latencies_ms.size());
    if (!latencies_ms.empty()) {
      result.p50_ms = latencies_ms[latencies_ms.size() / 2];
      result.p99_ms = latencies_ms[latencies_ms.size() * 99 / 100];
      result.max_ms = latencies_ms.back();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "writer %d: %s\n", index, e.what());
    result.failed = 1;
  }
  return result;
}

// A fresh schema of the PostgreSQL ledger `--ledger` names, for one measurement.
std::string fresh_pg_schema(const std::string& url, const std::string& name) {
  return url + (url.find('?') == std::string::npos ? "?" : "&") + "options=-csearch_path%3D" +
         name + "_" + std::to_string(getpid());
}

void throughput(const std::string& dir, int writers, double seconds, Load load,
                const std::string& pg_url = "") {
  std::string name = std::to_string(writers) + (load.hot ? "h" : "") +
                     (load.wants == Wants::supervisor ? "s" : "");
  std::string path = pg_url.empty() ? dir + "/throughput-" + name + ".db"
                                    : fresh_pg_schema(pg_url, "bench_w" + name);
  {
    std::unique_ptr<Ledger> opened = open_ledger(path);
    Ledger& ledger = *opened;
    std::vector<BudgetRule> rules;
    for (int team = 0; team < 4; ++team) {
      rules.push_back({{ScopeKind::team, "team-" + std::to_string(team)},
                       Money{1'000'000'000'000'000},
                       Period::month,
                       std::nullopt});
    }
    rules.push_back({{ScopeKind::experiment, "bench"},
                     Money{1'000'000'000'000'000},
                     Period::total,
                     std::nullopt});
    ledger.apply_budgets(rules, true);
  }
  int start_pipe[2], result_pipe[2];
  if (pipe(start_pipe) != 0 || pipe(result_pipe) != 0) throw std::runtime_error("pipe");
  std::vector<pid_t> children;
  for (int index = 0; index < writers; ++index) {
    pid_t pid = fork();
    if (pid == 0) {
      close(start_pipe[1]);
      close(result_pipe[0]);
      WriterResult result = writer(path, index, start_pipe[0], seconds, load);
      ssize_t written = write(result_pipe[1], &result, sizeof result);
      _exit(written == sizeof result ? 0 : 1);
    }
    children.push_back(pid);
  }
  close(start_pipe[0]);
  close(result_pipe[1]);
  // Every writer has opened the file and started its run before the clock starts.
  std::string go(static_cast<std::size_t>(writers), 'g');
  if (write(start_pipe[1], go.data(), go.size()) != static_cast<ssize_t>(go.size())) {
    throw std::runtime_error("could not start the writers");
  }
  close(start_pipe[1]);

  WriterResult total;
  double worst_p50 = 0, worst_p99 = 0, worst_max = 0;
  for (int index = 0; index < writers; ++index) {
    WriterResult result;
    if (read(result_pipe[0], &result, sizeof result) != sizeof result) {
      total.failed++;
      continue;
    }
    total.operations += result.operations;
    total.failed += result.failed;
    worst_p50 = std::max(worst_p50, result.p50_ms);
    worst_p99 = std::max(worst_p99, result.p99_ms);
    worst_max = std::max(worst_max, result.max_ms);
  }
  close(result_pipe[0]);
  for (pid_t pid : children) waitpid(pid, nullptr, 0);
  std::printf(
      "  %2d writer processes%s: %8.0f heartbeats/s (%s); per heartbeat p50 "
      "%.2f ms, p99 %.2f ms, max %.1f ms%s\n",
      writers, load.hot ? ", one hot team" : ", four teams",
      static_cast<double>(total.operations) / seconds,
      load.wants == Wants::every ? "each a ceiling raise" : "a raise per half claim", worst_p50,
      worst_p99, worst_max, total.failed ? " (SOME WRITERS FAILED)" : "");
}

// Inserts `count` finished runs straight into the runs table (one transaction, one prepared
// statement), then has the ledger rebuild its usage rows from them, as a repair would.
void build_big_ledger(const std::string& path, std::int64_t count) {
  double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::vector<BudgetRule> rules;
  auto name = [](const char* prefix, std::int64_t i) { return prefix + std::to_string(i); };
  for (int i = 0; i < 20; ++i) {
    rules.push_back(
        {{ScopeKind::team, name("team-", i)}, Money{50'000'000'000}, Period::month, {}});
  }
  for (int i = 0; i < 200; ++i) {
    Period period = i % 3 == 0 ? Period::total : i % 3 == 1 ? Period::week : Period::day;
    rules.push_back({{ScopeKind::experiment, name("exp-", i)}, Money{5'000'000'000}, period, {}});
  }
  for (int i = 0; i < 10; ++i) {
    rules.push_back(
        {{ScopeKind::project, name("project-", i)}, Money{90'000'000'000}, Period::total, {}});
  }
  for (int i = 0; i < 100; ++i) {
    rules.push_back({{ScopeKind::user, name("user-", i)}, Money{1'000'000'000}, Period::week, {}});
  }
  SqliteLedger ledger(path, {});
  ledger.apply_budgets(rules, true);

  auto started = SteadyClock::now();
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) throw std::runtime_error("open");
  sqlite3_exec(db, "PRAGMA synchronous = OFF; BEGIN", nullptr, nullptr, nullptr);
  sqlite3_stmt* insert = nullptr;
  const char* sql =
      "INSERT INTO runs (id, job_key, team, experiment, project, user_name, tags, command, "
      "fingerprint, host, pid, mode, status, reason, exit_code, rate_micros_per_hour, "
      "reserve_micros, budget_micros, shutdown_ms, sync_ms, started_at, day, heartbeat_at, "
      "reconcile_at, finished_at, spend_micros, ceiling_micros, allowed_micros, reconciled, "
      "would_stop_at, would_stop_reason, elapsed_seconds) VALUES (?1, NULL, ?2, ?3, ?4, ?5, "
      "'{}', '[\"python\",\"train.py\"]', 'f', 'host', 1, 'enforce', 'succeeded', 'exited', 0, "
      "36000000, 110000, NULL, 11000, 5000, ?6, ?7, ?8, ?8, ?8, ?9, ?10, ?10, 0, NULL, '', ?11)";
  if (sqlite3_prepare_v2(db, sql, -1, &insert, nullptr) != SQLITE_OK) {
    throw std::runtime_error(sqlite3_errmsg(db));
  }
  std::uint64_t state = 42;
  auto next = [&state] {  // xorshift: fast, fixed, good enough for spreading rows
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  for (std::int64_t i = 0; i < count; ++i) {
    double started_at = now - static_cast<double>(next() % (90 * 86400));
    double elapsed = static_cast<double>(60 + next() % 7200);
    std::int64_t spend = static_cast<std::int64_t>(elapsed * 10'000);  // $36/h
    std::string id = "run-" + std::to_string(i);
    std::string team = name("team-", static_cast<std::int64_t>(next() % 20));
    std::string experiment = name("exp-", static_cast<std::int64_t>(next() % 200));
    std::string project = name("project-", static_cast<std::int64_t>(next() % 10));
    std::string user = name("user-", static_cast<std::int64_t>(next() % 100));
    sqlite3_bind_text(insert, 1, id.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(insert, 2, team.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(insert, 3, experiment.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(insert, 4, project.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(insert, 5, user.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(insert, 6, started_at);
    sqlite3_bind_int64(insert, 7, utc_day(started_at));
    sqlite3_bind_double(insert, 8, started_at + elapsed);
    sqlite3_bind_int64(insert, 9, spend);
    sqlite3_bind_int64(insert, 10, spend + 110'000);
    sqlite3_bind_double(insert, 11, elapsed);
    if (sqlite3_step(insert) != SQLITE_DONE) throw std::runtime_error(sqlite3_errmsg(db));
    sqlite3_reset(insert);
  }
  sqlite3_finalize(insert);
  sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  std::printf("  inserted %lld finished runs in %.1f s\n", static_cast<long long>(count),
              seconds_since(started));

  started = SteadyClock::now();
  ledger.rebuild_aggregates();
  std::printf("  rebuilt the usage rows from them in %.1f s\n", seconds_since(started));
}

void budgets_view(const std::string& dir, std::int64_t runs) {
  std::string path = dir + "/big.db";
  build_big_ledger(path, runs);
  SqliteLedger ledger(path, {});
  std::vector<double> open_ms, budgets_ms, admission_ms;
  std::size_t rules = 0;
  for (int i = 0; i < 7; ++i) {
    auto started = SteadyClock::now();
    SqliteLedger fresh(path, {});  // what `spendcap budgets` pays: open, then one query per rule
    open_ms.push_back(seconds_since(started) * 1e3);
    started = SteadyClock::now();
    rules = fresh.budgets().size();
    budgets_ms.push_back(seconds_since(started) * 1e3);

    RunStart run = bench_run("admission-" + std::to_string(i), "team-3");
    run.experiment = "exp-7";
    run.project = "project-1";
    run.user = "user-5";
    started = SteadyClock::now();
    ledger.begin_run(run);
    ledger.finish_run({run.id, RunStatus::succeeded, "exited", 0, Money{1'000}, 1});
    admission_ms.push_back(seconds_since(started) * 1e3);
  }
  std::printf("  budgets() over %lld runs, %zu budgets: median %.2f ms (open: %.2f ms)\n",
              static_cast<long long>(runs), rules, median(budgets_ms), median(open_ms));
  std::printf("  begin_run + finish_run of a run in 4 budgeted scopes: median %.2f ms\n",
              median(admission_ms));
  std::printf("  ledger file: %.0f MB\n",
              static_cast<double>(std::filesystem::file_size(path)) / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 3;
  std::int64_t runs = 1'000'000;
  std::string dir;
  std::string pg_url;  // --ledger: the PostgreSQL ledger's heartbeats instead (a schema per run)
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--seconds") {
      seconds = std::atof(argv[i + 1]);
    } else if (flag == "--runs") {
      runs = std::atoll(argv[i + 1]);
    } else if (flag == "--dir") {
      dir = argv[i + 1];
    } else if (flag == "--ledger") {
      pg_url = argv[i + 1];
    } else if (flag == "--runner-ledger") {
      g_runner_url = argv[i + 1];  // the same server as --ledger, another role
    } else {
      std::fprintf(stderr,
                   "usage: ledger_bench [--seconds N] [--runs N] [--dir DIR] "
                   "[--ledger postgresql://OWNER...] [--runner-ledger postgresql://RUNNER...]\n");
      return 2;
    }
  }
  bool temporary = dir.empty();
  if (temporary) {
    char pattern[] = "/tmp/spendcap-ledger-bench-XXXXXX";
    if (!mkdtemp(pattern)) return 1;
    dir = pattern;
  }
  try {
    const Load kRaises{Wants::every, false}, kSupervisor{Wants::supervisor, false},
        kHot{Wants::supervisor, true}, kHotRaises{Wants::every, true};
    if (!pg_url.empty()) {
      std::printf("ledger throughput (PostgreSQL, %s):\n", redact_password(pg_url).c_str());
      for (int writers : {1, 8, 32}) throughput(dir, writers, seconds, kRaises, pg_url);
      for (int writers : {1, 8, 32}) throughput(dir, writers, seconds, kSupervisor, pg_url);
      throughput(dir, 32, seconds, kHot, pg_url);
      throughput(dir, 32, seconds, kHotRaises, pg_url);
      if (temporary) std::filesystem::remove_all(dir);
      return 0;
    }
    std::printf("ledger throughput (SQLite, WAL, %s):\n", dir.c_str());
    for (int writers : {1, 8, 32}) throughput(dir, writers, seconds, kRaises);
    throughput(dir, 32, seconds, kSupervisor);
    throughput(dir, 32, seconds, kHot);
    std::printf("budgets view:\n");
    budgets_view(dir, runs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ledger_bench: %s\n", e.what());
    if (temporary) std::filesystem::remove_all(dir);
    return 1;
  }
  if (temporary) std::filesystem::remove_all(dir);
  return 0;
}
