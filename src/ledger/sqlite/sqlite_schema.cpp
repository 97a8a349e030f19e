// The SQLite ledger's schema: its numbered migrations, migrating a file, and checking and
// rebuilding the aggregates kept beside the runs. Contract in sqlite_store.hpp.
#include "sqlite_impl.hpp"

#include "spendcap/ledger/rollup_sql.hpp"

namespace spendcap {

namespace {

// Migration N (1-based) takes the schema from version N-1 to N. Never edit one that has shipped:
// add the next.
const char* const kMigrations[] = {
    // v1
    R"sql(
CREATE TABLE runs (
  id TEXT PRIMARY KEY,
  job_key TEXT,                        -- NULL when the run has none
  team TEXT NOT NULL,
  experiment TEXT NOT NULL,
  project TEXT NOT NULL,
  user_name TEXT NOT NULL,             -- not "user": PostgreSQL reserves it; both schemas alike
  tags TEXT NOT NULL,                  -- JSON object
  command TEXT NOT NULL,               -- JSON array
  fingerprint TEXT NOT NULL,
  host TEXT NOT NULL,
  pid INTEGER NOT NULL,
  mode TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN
    ('running', 'succeeded', 'failed', 'killed', 'refused', 'lost')),
  reason TEXT NOT NULL,
  exit_code INTEGER,
  rate_micros_per_hour INTEGER NOT NULL,
  reserve_micros INTEGER NOT NULL,
  budget_micros INTEGER,               -- --budget as given; NULL when none
  shutdown_ms INTEGER NOT NULL,
  sync_ms INTEGER NOT NULL,
  started_at REAL NOT NULL,            -- unix seconds, the ledger's clock
  day INTEGER NOT NULL,                -- utc_day(started_at): the usage rows it adds to
  heartbeat_at REAL NOT NULL,
  reconcile_at REAL NOT NULL,          -- when it is charged its ceiling if no heartbeat comes
  finished_at REAL,
  spend_micros INTEGER NOT NULL,
  ceiling_micros INTEGER NOT NULL,
  allowed_micros INTEGER NOT NULL,     -- what enforce mode would hold (warn mode: below ceiling)
  reconciled INTEGER NOT NULL,         -- 1: lost and charged its ceiling, no final row yet
  would_stop_at REAL,
  would_stop_reason TEXT NOT NULL,
  elapsed_seconds REAL
);
-- Unfinished runs only (a few), ordered by when they are due to be reconciled: every transaction
-- asks this index first.
CREATE INDEX runs_unfinished ON runs(reconcile_at) WHERE status = 'running';
CREATE INDEX runs_job_key ON runs(job_key) WHERE job_key IS NOT NULL;

CREATE TABLE budgets (
  scope_kind TEXT NOT NULL,
  scope_name TEXT NOT NULL,
  amount_micros INTEGER NOT NULL,
  period TEXT NOT NULL,
  max_run_micros INTEGER,
  PRIMARY KEY (scope_kind, scope_name)
);

-- Per scope and UTC start day: spent = finished runs' spend, held = unfinished runs' ceilings,
-- live = unfinished runs' last reported spend.
CREATE TABLE usage (
  scope_kind TEXT NOT NULL,
  scope_name TEXT NOT NULL,
  day INTEGER NOT NULL,
  spent_micros INTEGER NOT NULL,
  held_micros INTEGER NOT NULL,
  live_micros INTEGER NOT NULL,
  PRIMARY KEY (scope_kind, scope_name, day)
) WITHOUT ROWID;

CREATE TABLE stop_orders (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  scope_kind TEXT NOT NULL,
  scope_name TEXT NOT NULL,
  reason TEXT NOT NULL,
  placed_by TEXT NOT NULL,
  placed_at REAL NOT NULL,
  cleared_at REAL
);
CREATE INDEX stop_orders_active ON stop_orders(scope_kind, scope_name) WHERE cleared_at IS NULL;
)sql",
    // v2: who admitted a run and its last reported spend, so that a spooled final row can be
    // checked before it is replayed; and overrun runs (final spend above the ceiling).
    R"sql(
ALTER TABLE runs ADD COLUMN uid INTEGER;  -- NULL: admitted before uids were recorded
ALTER TABLE runs ADD COLUMN reported_spend_micros INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN overrun INTEGER NOT NULL DEFAULT 0;
-- A reconciled run's spend is its ceiling; its last heartbeat's spend is not known any more.
UPDATE runs SET reported_spend_micros = spend_micros WHERE status = 'running';
)sql",
    // v3: the status `preempted`. Widening a CHECK constraint leaves every stored row valid, the
    // case SQLite documents for editing the schema text in place ("Making Other Kinds Of Table
    // Schema Changes"): no table rebuild, so columns that other migrations added are kept. The
    // CREATE/DROP bumps the schema cookie, so other connections reparse; migrate() resets this one.
    R"sql(
PRAGMA writable_schema = ON;
UPDATE sqlite_master
  SET sql = replace(sql, '''refused'', ''lost'')', '''refused'', ''lost'', ''preempted'')')
  WHERE type = 'table' AND name = 'runs';
PRAGMA writable_schema = OFF;
CREATE TABLE spendcap_schema_bump (x);
DROP TABLE spendcap_schema_bump;
)sql",
    // v4: the webhook outbox (issue 9): events not delivered before their spendcap exited. The
    // destination is named as the policy named it ("env:NAME"), never a secret URL.
    R"sql(
CREATE TABLE outbox (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  event_id TEXT NOT NULL,
  event TEXT NOT NULL,
  run_id TEXT NOT NULL,
  user_name TEXT NOT NULL,
  destination TEXT NOT NULL,
  format TEXT NOT NULL,
  secret_env TEXT NOT NULL,            -- '' when unsigned
  body TEXT NOT NULL,
  created_at REAL NOT NULL,            -- unix seconds, the ledger's clock
  attempts INTEGER NOT NULL,
  last_error TEXT NOT NULL
);
CREATE INDEX outbox_user ON outbox(user_name);
)sql",
    // v5: what a run's GPUs did (GPU measurement), written with its final row. NULL where not
    // measured, never 0; gpu_measured NULL: no GPU record at all.
    R"sql(
ALTER TABLE runs ADD COLUMN gpu_measured INTEGER;      -- 1 measured, 0 not (gpu_not_measured says why)
ALTER TABLE runs ADD COLUMN gpu_not_measured TEXT;
ALTER TABLE runs ADD COLUMN gpu_devices INTEGER;
ALTER TABLE runs ADD COLUMN gpu_allocated_seconds REAL;
ALTER TABLE runs ADD COLUMN gpu_busy_seconds REAL;
ALTER TABLE runs ADD COLUMN gpu_idle_spend_micros INTEGER;
ALTER TABLE runs ADD COLUMN gpu_energy_kwh REAL;       -- x PUE
ALTER TABLE runs ADD COLUMN gpu_co2_kg REAL;
ALTER TABLE runs ADD COLUMN gpu_energy_cost_micros INTEGER;  -- USD, never part of spend
ALTER TABLE runs ADD COLUMN gpu_sources TEXT;
ALTER TABLE runs ADD COLUMN gpu_timeline TEXT;         -- [[minute, utilisation, watts], ...]
)sql",
    // v6: accepted results
    // (`spendcap accept`). Reports scan the runs table: an index on started_at made a report of
    // 1M runs 10x slower (a b-tree lookup per row), and a scan is well under a second.
    R"sql(
CREATE TABLE accepted_results (
  run_id TEXT PRIMARY KEY,
  note TEXT NOT NULL,
  accepted_by TEXT NOT NULL,
  accepted_at REAL NOT NULL
);
)sql",
    // v7: the progress channel's last report
    // with the run, and the crash-loop guard's look-up of a command's recent runs.
    R"sql(
ALTER TABLE runs ADD COLUMN metric_name TEXT;  -- NULL: the job did not report it
ALTER TABLE runs ADD COLUMN metric_value REAL;
ALTER TABLE runs ADD COLUMN units REAL;
ALTER TABLE runs ADD COLUMN egress_gb REAL;
CREATE INDEX runs_fingerprint ON runs(fingerprint, started_at);
)sql",
    // v8: a budget's members, so that a shared ledger checks
    // them whatever policy its users load.
    R"sql(
ALTER TABLE budgets ADD COLUMN member_groups TEXT;  -- JSON array of Unix group names; NULL: anyone
)sql",
    // v10 (the 9th entry on this branch; v9 is another branch's): a run's checkpoint storage
    // (--checkpoint-dir); NULL: not measured.
    R"sql(
ALTER TABLE runs ADD COLUMN storage_peak_gb REAL;
ALTER TABLE runs ADD COLUMN storage_spend_micros INTEGER;  -- part of spend_micros
)sql",
    // v11 (the 10th entry; schema version 10; issue 21: pricing per run): how the run's rate was
    // priced, written at admission, for
    // FOCUS's PricingCategory and the rollups. NULL: unknown (every run recorded before v11).
    R"sql(
ALTER TABLE runs ADD COLUMN pricing TEXT CHECK (pricing IN ('on-demand', 'spot', 'reserved'));
)sql",
    // v12 (the 11th entry; schema version 11; issue 19: lost runs are told): the webhooks each run
    // had (by name, never a secret),
    // and when its `lost` event was queued, so that whoever reconciles it queues it once.
    R"sql(
CREATE TABLE run_webhooks (
  run_id TEXT PRIMARY KEY,
  webhooks TEXT NOT NULL,  -- JSON array of {destination, format, secret_env}
  lost_told_at REAL        -- NULL: its lost event is not queued (yet)
);
CREATE INDEX runs_reconciled ON runs(day) WHERE reconciled = 1;
)sql",
    // v13 (the 12th entry; schema version 12; issue 23: the grant rule in PostgreSQL's server):
    // nothing changes here; the number
    // keeps both backends' versions equal.
    R"sql(
SELECT 1;
)sql",
};

// v14 (schema version 13; issue 23 item 3: showback from aggregates): the rollups (rollup.hpp),
// kept by triggers on runs and backfilled from the runs already there; and the overrun runs found
// by an index, so that `budgets` reads aggregates and a few rows, never every run; and an index on
// started_at for the partial days at a report's ends. Built from
// rollup_sql.hpp, which PostgreSQL's v14 shares: its text must not change once shipped (a new cut
// is a new migration).
std::string rollups_migration() {
  using namespace rollup_sql;
  return create_tables(Dialect::sqlite) + sqlite_v14_triggers() + rebuild(Dialect::sqlite) +
         "CREATE INDEX runs_overrun ON runs(day) WHERE overrun = 1;\n"
         "CREATE INDEX runs_started ON runs(started_at);\n";
}

// Schema version 17 (issue 30): shared with PostgreSQL's (the same SQL).
constexpr const char* kBudgetWarnings = R"sql(
CREATE TABLE budget_warnings (
  scope_kind TEXT NOT NULL,
  scope_name TEXT NOT NULL,
  period_day BIGINT NOT NULL,          -- the period's first UTC day; 0 for "total"
  percent INTEGER NOT NULL,
  run_id TEXT NOT NULL,                -- the run that announced it
  announced_at DOUBLE PRECISION NOT NULL,
  PRIMARY KEY (scope_kind, scope_name, period_day, percent)
);
-- The commitment a reserved run used: the reserved price per GPU or instance hour (StoreTxn's
-- RunRecord::commitment); NULL: none.
ALTER TABLE runs ADD COLUMN commitment_micros BIGINT;
)sql";

// Schema version 19 (issue 30 item 4), as PostgreSQL's: what `show` gives that the runs table did
// not keep. At admission: the job's working directory, the run budget in effect and where it came
// from (budget_source_text: recorded, so that a later policy does not rewrite it). With the final
// row: the progress channel's last good line and step, and the checkpoint (the signal the kill
// path sent, to how many processes and when; when the job's checkpoint file appeared). NULL: not
// recorded (a run before v19), or nothing of the kind happened.
constexpr const char* kWholeRecord = R"sql(
ALTER TABLE runs ADD COLUMN cwd TEXT;
ALTER TABLE runs ADD COLUMN run_budget_micros BIGINT;
ALTER TABLE runs ADD COLUMN budget_source TEXT;
ALTER TABLE runs ADD COLUMN progress_step BIGINT;
ALTER TABLE runs ADD COLUMN progress_total_steps BIGINT;
ALTER TABLE runs ADD COLUMN progress_line TEXT;
ALTER TABLE runs ADD COLUMN checkpoint_signal TEXT;          -- "SIGUSR1", "none"
ALTER TABLE runs ADD COLUMN checkpoint_signalled INTEGER;    -- processes it was sent to
ALTER TABLE runs ADD COLUMN checkpoint_signal_seconds REAL;  -- after launch
ALTER TABLE runs ADD COLUMN checkpoint_written_seconds REAL; -- after launch; NULL: not written
)sql";

// Schema version 23 (issue 38 item 4), as PostgreSQL's (which adds db_role to the key): a user's
// refused runs in a minute of the ledger's clock (minute = floor(unix seconds / 60)), and how many
// of them were stored as rows (at most kRecordedRefusalsPerMinute, ledger.hpp).
constexpr const char* kRefusedCounts = R"sql(
CREATE TABLE refused_counts (
  user_name TEXT NOT NULL,
  minute BIGINT NOT NULL,
  refused BIGINT NOT NULL,             -- refused runs of the user in that minute
  recorded BIGINT NOT NULL,            -- of which stored as runs rows
  last_at DOUBLE PRECISION NOT NULL,   -- the last one, unix seconds
  PRIMARY KEY (user_name, minute)
);
)sql";

const std::vector<std::string>& migrations() {
  static const std::vector<std::string> all = [] {
    std::vector<std::string> texts(std::begin(kMigrations), std::end(kMigrations));
    texts.push_back(rollups_migration());
    // v15 (schema version 14; issue 23): the rollups kept through a journal (rollup_sql.hpp's
    // sqlite_journal): v14's triggers cost every run about 40 ms of CPU in SQLite's compiler.
    texts.push_back(rollup_sql::sqlite_journal());
    // v16 (schema version 16; issue 32): nothing changes here (PostgreSQL's grant helpers become
    // SQL functions the planner inlines); the number keeps both backends' versions equal.
    texts.push_back("SELECT 1;\n");
    // v17 (schema version 17; issue 30): a budget's warning thresholds announced, once per scope,
    // period and threshold whatever the number of runs (Ledger::claim_warning); a run's commitment.
    texts.push_back(kBudgetWarnings);
    // v18 (schema version 18; issue 33): an outbox entry's claim, so that two spendcaps never
    // deliver it at once (Ledger::claim_outbox): who took it (a run id, '' for a flush or no
    // one) and until when (unix seconds, the ledger's clock; 0: free).
    texts.push_back(
        "ALTER TABLE outbox ADD COLUMN claimed_by TEXT NOT NULL DEFAULT '';\n"
        "ALTER TABLE outbox ADD COLUMN claimed_until REAL NOT NULL DEFAULT 0;\n");
    // v19 (schema version 19; issue 30 item 4): the whole record of a run for `show`.
    texts.push_back(kWholeRecord);
    // v20 (schema version 20; issue 30 item 4): nothing changes here (PostgreSQL's heartbeat
    // function takes the progress so far); the number keeps both backends' versions equal.
    texts.push_back("SELECT 1;\n");
    // v21 (schema version 21; issue 38 item 7): nothing changes here (PostgreSQL's scope locks take
    // a key users cannot compute); the number keeps both backends' versions equal.
    texts.push_back("SELECT 1;\n");
    // v22 (schema version 22; issue 40 item 3): spendcap's own exit status beside the command's
    // (exit_code): a budget trip exits 124 after a job that checkpointed and exited 0. NULL: a
    // run before v22, or unfinished.
    texts.push_back("ALTER TABLE runs ADD COLUMN spendcap_exit_code INTEGER;\n");
    // v23 (schema version 23; issues 38 item 4 and 40 item 4): refused runs counted per user and
    // minute (StoreTxn::count_refusal), shared with PostgreSQL's v23, whose grant function also
    // takes the fair share of a shared budget there.
    texts.push_back(kRefusedCounts);
    // v24: changes nothing, and stays so: ledgers have recorded it as done, so a change that
    // needs a migration appends one after v25 instead of filling this entry.
    texts.push_back("SELECT 1;\n");
    // v25 (issue 40 item 6): nothing changes here (a run's tag `tracker` from its progress
    // channel is written into its tags, StoreTxn::set_run_tracker; PostgreSQL's functions take
    // it); the number keeps both backends' versions equal.
    texts.push_back("SELECT 1;\n");
    // v26 (schema version 25; issue 40 item 7): a killed run that wrote its checkpoint wastes only
    // the spend after it (waste.hpp): the journal keeps what that reads, and the cells are rebuilt
    // with it. Shares its rebuild with PostgreSQL's v26.
    texts.push_back(rollup_sql::sqlite_journal_v26());
    // v27 (recorded as version 26, the labels one ahead since v24's; issue 40 item 7): when a
    // running run is expected to have done its steps at its pace (unix seconds, the ledger's clock:
    // the heartbeat's now + HeartbeatProgress::seconds_left), written with its progress at each
    // heartbeat and with the final row; `ps` shows ETA from it. NULL: not known (no total steps, no
    // pace yet, or a run before v27).
    texts.push_back("ALTER TABLE runs ADD COLUMN progress_eta_at REAL;\n");
    return texts;
  }();
  return all;
}

// The array's, and the 14 migrations() adds after it (v14's rollups to v27).
const int kSchemaVersion = static_cast<int>(std::size(kMigrations)) + 14;
// The first version whose rollups are kept through the journal (v15).
const int kJournalVersion = static_cast<int>(std::size(kMigrations)) + 2;

}  // namespace

int sqlite_detail::latest_schema_version() {
  return kSchemaVersion;
}

int SqliteStore::Impl::current_schema_version() {
  auto tables = query(
      "SELECT count(*), sum(name = 'schema_version') FROM sqlite_master "
      "WHERE type = 'table'");
  tables.step();
  std::int64_t table_count = tables.i64(0);
  bool has_version = tables.i64(1) > 0;
  if (!has_version) {
    if (table_count > 0) {
      throw error("not a spendcap ledger (an SQLite file with other tables)",
                  "give --ledger another file");
    }
    return 0;
  }
  auto q = query("SELECT COALESCE(MAX(version), 0) FROM schema_version");
  q.step();
  return static_cast<int>(q.i64(0));
}

void SqliteStore::Impl::migrate() {
  // A migration added to migrations() and not counted in kSchemaVersion would never run.
  if (migrations().size() != static_cast<std::size_t>(kSchemaVersion)) {
    throw error("this spendcap counts " + std::to_string(kSchemaVersion) +
                " schema versions and has " + std::to_string(migrations().size()) + " migrations");
  }
  int version = read([&] { return current_schema_version(); });
  if (version == kSchemaVersion) {
    journaled = true;
    return;
  }
  // One migration per transaction, and the connection's schema reread after each: a migration
  // that edits the schema text in place (v3) must be seen before the next one alters the table
  // (ALTER TABLE ADD COLUMN splices into the text at the offset this connection parsed).
  for (bool done = false; !done;) {
    write([&] {
      version = current_schema_version();  // another process may have migrated meanwhile
      if (version >= kSchemaVersion) {
        done = true;
        return;
      }
      if (version == 0)
        exec("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at REAL)");
      int next = version + 1;
      char* message = nullptr;
      int rc = sqlite3_exec(db, migrations()[next - 1].c_str(), nullptr, nullptr, &message);
      if (rc != SQLITE_OK) {
        std::string why = message ? message : sqlite3_errstr(rc);
        sqlite3_free(message);
        if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) throw Busy{};
        throw error("migration to schema " + std::to_string(next) + " failed: " + why);
      }
      query("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)")
          .bind_all(next, now())
          .run();
    });
    exec("PRAGMA writable_schema = RESET");
  }
  if (version > kSchemaVersion) {
    throw error("its schema version " + std::to_string(version) +
                    " is newer than this spendcap's (" + std::to_string(kSchemaVersion) + ")",
                "upgrade spendcap on this host");
  }
  journaled = version >= kJournalVersion;
}

// ---- aggregates ----

namespace {
// The usage rows as the runs table says they should be (zero rows left out).
constexpr const char* kRecomputedUsage = R"sql(
WITH scoped (scope_kind, scope_name, day, status, spend_micros, ceiling_micros) AS (
  SELECT 'team', team, day, status, spend_micros, ceiling_micros FROM runs WHERE team <> ''
  UNION ALL
  SELECT 'experiment', experiment, day, status, spend_micros, ceiling_micros FROM runs
    WHERE experiment <> ''
  UNION ALL
  SELECT 'project', project, day, status, spend_micros, ceiling_micros FROM runs WHERE project <> ''
  UNION ALL
  SELECT 'user', user_name, day, status, spend_micros, ceiling_micros FROM runs WHERE user_name <> ''
)
SELECT scope_kind, scope_name, day,
  SUM(CASE WHEN status = 'running' THEN 0 ELSE spend_micros END) AS spent_micros,
  SUM(CASE WHEN status = 'running' THEN ceiling_micros ELSE 0 END) AS held_micros,
  SUM(CASE WHEN status = 'running' THEN spend_micros ELSE 0 END) AS live_micros
FROM scoped GROUP BY scope_kind, scope_name, day
HAVING spent_micros <> 0 OR held_micros <> 0 OR live_micros <> 0
)sql";
}  // namespace

std::vector<std::string> SqliteStore::verify_aggregates() {
  return impl_->read([&] {
    std::vector<std::string> differences;
    // A missing row and a row of zeros are the same thing. The join finds each usage row by its
    // primary key: linear in the number of rows.
    auto q = impl_->query(std::string("WITH expected AS MATERIALIZED (") + kRecomputedUsage +
                          ") SELECT COALESCE(e.scope_kind, a.scope_kind), "
                          "COALESCE(e.scope_name, a.scope_name), COALESCE(e.day, a.day), "
                          "COALESCE(e.spent_micros, 0), COALESCE(e.held_micros, 0), "
                          "COALESCE(e.live_micros, 0), COALESCE(a.spent_micros, 0), "
                          "COALESCE(a.held_micros, 0), COALESCE(a.live_micros, 0) "
                          "FROM expected e FULL JOIN usage a ON a.scope_kind = e.scope_kind "
                          "AND a.scope_name = e.scope_name AND a.day = e.day "
                          "WHERE COALESCE(e.spent_micros, 0) <> COALESCE(a.spent_micros, 0) "
                          "OR COALESCE(e.held_micros, 0) <> COALESCE(a.held_micros, 0) "
                          "OR COALESCE(e.live_micros, 0) <> COALESCE(a.live_micros, 0)");
    auto sums = [&](int column) {
      return "spent " + q.text(column) + ", held " + q.text(column + 1) + ", live " +
             q.text(column + 2);
    };
    while (q.step()) {
      differences.push_back("usage " + q.text(0) + ":" + q.text(1) + " day " + q.text(2) + " is (" +
                            sums(6) + "), the runs say (" + sums(3) + ")");
    }
    auto cells = impl_->query(rollup_sql::differences(rollup_sql::Dialect::sqlite));
    while (cells.step()) {
      std::string key;
      for (int column = 0; column < rollup_sql::kKeyColumns; ++column) {
        key += (column ? " " : "") + cells.text(column);
      }
      differences.push_back("rollup (" + key + ") holds " + cells.text(9) + " runs, spend " +
                            cells.text(11) + "; the runs say " + cells.text(8) + ", spend " +
                            cells.text(10));
    }
    return differences;
  });
}

void SqliteStore::rebuild_aggregates() {
  impl_->write([&] {
    impl_->exec("DELETE FROM usage");
    impl_->exec("DELETE FROM rollup_journal");
    impl_->exec(std::string("INSERT INTO usage (scope_kind, scope_name, day, spent_micros, "
                            "held_micros, live_micros) ") +
                kRecomputedUsage);
    // And the rollups, from the runs (the same statements as the latest migration's rebuild).
    char* message = nullptr;
    std::string rebuild =
        rollup_sql::rebuild(rollup_sql::Dialect::sqlite, rollup_sql::kLatestRules);
    int rc = sqlite3_exec(impl_->db, rebuild.c_str(), nullptr, nullptr, &message);
    if (rc != SQLITE_OK) {
      std::string why = message ? message : sqlite3_errstr(rc);
      sqlite3_free(message);
      if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) throw Busy{};
      throw impl_->error("rebuilding the rollups failed: " + why);
    }
  });
}

}  // namespace spendcap
