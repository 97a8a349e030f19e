// The PostgreSQL ledger's schema. Contract in postgres_schema.hpp; roles in postgres_store.hpp.
#include "postgres_schema.hpp"

#include "spendcap/ledger/rollup_sql.hpp"

namespace spendcap::postgres_schema {

const std::vector<std::string> kMigrations = {
    // v1: as SQLite's v1 (types widened: BIGINT micros, DOUBLE PRECISION seconds), plus the login
    // role that admitted each run and placed each stop order, which the server's checks use.
    R"sql(
CREATE TABLE runs (
  id TEXT PRIMARY KEY,
  job_key TEXT,
  team TEXT NOT NULL,
  experiment TEXT NOT NULL,
  project TEXT NOT NULL,
  user_name TEXT NOT NULL,
  tags TEXT NOT NULL,
  command TEXT NOT NULL,
  fingerprint TEXT NOT NULL,
  host TEXT NOT NULL,
  pid INTEGER NOT NULL,
  mode TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN
    ('running', 'succeeded', 'failed', 'killed', 'refused', 'lost')),
  reason TEXT NOT NULL,
  exit_code INTEGER,
  rate_micros_per_hour BIGINT NOT NULL,
  reserve_micros BIGINT NOT NULL,
  budget_micros BIGINT,
  shutdown_ms BIGINT NOT NULL,
  sync_ms BIGINT NOT NULL,
  started_at DOUBLE PRECISION NOT NULL,
  day BIGINT NOT NULL,
  heartbeat_at DOUBLE PRECISION NOT NULL,
  reconcile_at DOUBLE PRECISION NOT NULL,
  finished_at DOUBLE PRECISION,
  spend_micros BIGINT NOT NULL,
  ceiling_micros BIGINT NOT NULL,
  allowed_micros BIGINT NOT NULL,
  reconciled INTEGER NOT NULL,
  would_stop_at DOUBLE PRECISION,
  would_stop_reason TEXT NOT NULL,
  elapsed_seconds DOUBLE PRECISION,
  db_role TEXT NOT NULL DEFAULT session_user  -- the login role that admitted it
);
CREATE INDEX runs_unfinished ON runs(reconcile_at) WHERE status = 'running';
CREATE INDEX runs_job_key ON runs(job_key) WHERE job_key IS NOT NULL;

CREATE TABLE budgets (
  scope_kind TEXT NOT NULL,
  scope_name TEXT NOT NULL,
  amount_micros BIGINT NOT NULL,
  period TEXT NOT NULL,
  max_run_micros BIGINT,
  PRIMARY KEY (scope_kind, scope_name)
);

CREATE TABLE usage (
  scope_kind TEXT NOT NULL,
  scope_name TEXT NOT NULL,
  day BIGINT NOT NULL,
  spent_micros BIGINT NOT NULL,
  held_micros BIGINT NOT NULL,
  live_micros BIGINT NOT NULL,
  PRIMARY KEY (scope_kind, scope_name, day)
);

CREATE TABLE stop_orders (
  id BIGSERIAL PRIMARY KEY,
  scope_kind TEXT NOT NULL,
  scope_name TEXT NOT NULL,
  reason TEXT NOT NULL,
  placed_by TEXT NOT NULL,
  placed_at DOUBLE PRECISION NOT NULL,
  cleared_at DOUBLE PRECISION,
  db_role TEXT NOT NULL DEFAULT session_user  -- the login role that placed it
);
CREATE INDEX stop_orders_active ON stop_orders(scope_kind, scope_name) WHERE cleared_at IS NULL;
)sql",
    // v2: as SQLite's v2.
    R"sql(
ALTER TABLE runs ADD COLUMN uid BIGINT;
ALTER TABLE runs ADD COLUMN reported_spend_micros BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN overrun INTEGER NOT NULL DEFAULT 0;
UPDATE runs SET reported_spend_micros = spend_micros WHERE status = 'running';
)sql",
    // v3: as SQLite's v3, the status `preempted` (PostgreSQL alters the constraint itself).
    R"sql(
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check CHECK (status IN
  ('running', 'succeeded', 'failed', 'killed', 'refused', 'lost', 'preempted'));
)sql",
    // v4: as SQLite's v4, the webhook outbox, plus the login role that stored each entry: a runner
    // sees and changes only its own entries (row-level security; the policy is in routines()).
    R"sql(
CREATE TABLE outbox (
  id BIGSERIAL PRIMARY KEY,
  event_id TEXT NOT NULL,
  event TEXT NOT NULL,
  run_id TEXT NOT NULL,
  user_name TEXT NOT NULL,
  destination TEXT NOT NULL,
  format TEXT NOT NULL,
  secret_env TEXT NOT NULL,
  body TEXT NOT NULL,
  created_at DOUBLE PRECISION NOT NULL,
  attempts INTEGER NOT NULL,
  last_error TEXT NOT NULL,
  db_role TEXT NOT NULL DEFAULT session_user  -- the login role that stored it
);
CREATE INDEX outbox_user ON outbox(user_name);
ALTER TABLE outbox ENABLE ROW LEVEL SECURITY;
)sql",
    // v5: as SQLite's v5, what a run's GPUs did.
    R"sql(
ALTER TABLE runs ADD COLUMN gpu_measured INTEGER;
ALTER TABLE runs ADD COLUMN gpu_not_measured TEXT;
ALTER TABLE runs ADD COLUMN gpu_devices INTEGER;
ALTER TABLE runs ADD COLUMN gpu_allocated_seconds DOUBLE PRECISION;
ALTER TABLE runs ADD COLUMN gpu_busy_seconds DOUBLE PRECISION;
ALTER TABLE runs ADD COLUMN gpu_idle_spend_micros BIGINT;
ALTER TABLE runs ADD COLUMN gpu_energy_kwh DOUBLE PRECISION;
ALTER TABLE runs ADD COLUMN gpu_co2_kg DOUBLE PRECISION;
ALTER TABLE runs ADD COLUMN gpu_energy_cost_micros BIGINT;
ALTER TABLE runs ADD COLUMN gpu_sources TEXT;
ALTER TABLE runs ADD COLUMN gpu_timeline TEXT;
)sql",
    // v6: as SQLite's v6, accepted results, plus the login role that accepted each.
    R"sql(
CREATE TABLE accepted_results (
  run_id TEXT PRIMARY KEY,
  note TEXT NOT NULL,
  accepted_by TEXT NOT NULL,
  accepted_at DOUBLE PRECISION NOT NULL,
  db_role TEXT NOT NULL DEFAULT session_user
);
)sql",
    // v7: as SQLite's v7, the progress channel's last report and the fingerprint index.
    R"sql(
ALTER TABLE runs ADD COLUMN metric_name TEXT;
ALTER TABLE runs ADD COLUMN metric_value DOUBLE PRECISION;
ALTER TABLE runs ADD COLUMN units DOUBLE PRECISION;
ALTER TABLE runs ADD COLUMN egress_gb DOUBLE PRECISION;
CREATE INDEX runs_fingerprint ON runs(fingerprint, started_at);
)sql",
    // v8: as SQLite's v8, a budget's member groups (JSON array; NULL: anyone).
    R"sql(
ALTER TABLE budgets ADD COLUMN member_groups TEXT;
)sql",
    // v10 (the 9th entry on this branch, as SQLite's): a run's checkpoint storage.
    R"sql(
ALTER TABLE runs ADD COLUMN storage_peak_gb DOUBLE PRECISION;
ALTER TABLE runs ADD COLUMN storage_spend_micros BIGINT;
)sql",
    // v11 (the 10th entry; schema version 10; issue 21: pricing per run): as SQLite's v11.
    // spendcap_insert_run takes it from the row
    // (json_populate_record), so the function itself is unchanged.
    R"sql(
ALTER TABLE runs ADD COLUMN pricing TEXT CHECK (pricing IN ('on-demand', 'spot', 'reserved'));
)sql",
    // v12 (the 11th entry; schema version 11; issue 19: lost runs are told), as SQLite's v12, plus
    // the login role that recorded the
    // webhooks: the run's own, whose outbox the lost event goes to.
    R"sql(
CREATE TABLE run_webhooks (
  run_id TEXT PRIMARY KEY,
  webhooks TEXT NOT NULL,
  lost_told_at DOUBLE PRECISION,
  db_role TEXT NOT NULL DEFAULT session_user
);
CREATE INDEX runs_reconciled ON runs(day) WHERE reconciled = 1;
)sql",
    // v13 (the 12th entry; schema version 12; issue 23: the grant rule in the server): the spend of
    // an unfinished run that its
    // scopes' live sums count. A heartbeat that raises nothing writes only its run's row, so the
    // usage rows of a hot team are written once a claim, not once a heartbeat; readers add the
    // difference from the runs (postgres_store.cpp's usage()).
    R"sql(
ALTER TABLE runs ADD COLUMN usage_live_micros BIGINT NOT NULL DEFAULT 0;
UPDATE runs SET usage_live_micros = spend_micros WHERE status = 'running';
CREATE INDEX runs_running_team ON runs(team, day) WHERE status = 'running';
)sql",
    // v14 (the 13th entry; schema version 13; issue 23 item 3): the rollups, as SQLite's v14 (the
    // same SQL, rollup_sql.hpp), backfilled here; routines() installs the trigger that keeps them.
    rollup_sql::create_tables(rollup_sql::Dialect::postgres) +
        rollup_sql::rebuild(rollup_sql::Dialect::postgres) +
        "CREATE INDEX runs_overrun ON runs(day) WHERE overrun = 1;\n"
        "CREATE INDEX runs_started ON runs(started_at);\n",
    // v15 (the 14th entry): nothing changes here (SQLite's v15 replaces its rollup triggers by a
    // journal; PostgreSQL's trigger runs in the server); the number keeps both versions equal.
    "SELECT 1;\n",
    // v16 (the 15th entry; issue 32): nothing changes in the tables; routines() replaces the pure
    // grant helpers by SQL functions the planner inlines (postgres_grants.cpp).
    "SELECT 1;\n",
    // v17 (the 16th entry; issue 30), as SQLite's: a budget's warning thresholds announced once per
    // scope, period and threshold (runners insert rows, routines() grants it), and the commitment
    // a reserved run used.
    R"sql(
CREATE TABLE budget_warnings (
  scope_kind TEXT NOT NULL,
  scope_name TEXT NOT NULL,
  period_day BIGINT NOT NULL,
  percent INTEGER NOT NULL,
  run_id TEXT NOT NULL,
  announced_at DOUBLE PRECISION NOT NULL,
  PRIMARY KEY (scope_kind, scope_name, period_day, percent)
);
ALTER TABLE runs ADD COLUMN commitment_micros BIGINT;
)sql",
    // v18 (the 17th entry; issue 33): as SQLite's v18, an outbox entry's claim; a runner sets it
    // on its own entries (row-level security), granted in routines().
    "ALTER TABLE outbox ADD COLUMN claimed_by TEXT NOT NULL DEFAULT '';\n"
    "ALTER TABLE outbox ADD COLUMN claimed_until DOUBLE PRECISION NOT NULL DEFAULT 0;\n",
    // v19 (the 18th entry; issue 30 item 4): as SQLite's v19, the whole record of a run for
    // `show`. spendcap_admit sets the budget's source from its plan; spendcap_finish and
    // spendcap_update_run write the final row's progress and checkpoint.
    R"sql(
ALTER TABLE runs ADD COLUMN cwd TEXT;
ALTER TABLE runs ADD COLUMN run_budget_micros BIGINT;
ALTER TABLE runs ADD COLUMN budget_source TEXT;
ALTER TABLE runs ADD COLUMN progress_step BIGINT;
ALTER TABLE runs ADD COLUMN progress_total_steps BIGINT;
ALTER TABLE runs ADD COLUMN progress_line TEXT;
ALTER TABLE runs ADD COLUMN checkpoint_signal TEXT;
ALTER TABLE runs ADD COLUMN checkpoint_signalled INTEGER;
ALTER TABLE runs ADD COLUMN checkpoint_signal_seconds DOUBLE PRECISION;
ALTER TABLE runs ADD COLUMN checkpoint_written_seconds DOUBLE PRECISION;
)sql",
    // v20 (the 19th entry; issue 30 item 4): nothing changes in the tables; routines() replaces
    // spendcap_heartbeat by one that takes the run's progress so far (a ledger at v19 kept the
    // old one: routines() run only after a migration).
    "SELECT 1;\n",
    // v21 (the 20th entry; issue 38 item 7): the scope locks' secret. A scope's
    // advisory lock key
    // was hashtextextended(schema:kind:name), which any role could compute and hold (a user of
    // one team, in an open transaction, made another team's runs refused and its running runs
    // trip ledger-unreachable). The key now hashes a random salt only the ledger's owner reads:
    // it is computed in the owner's functions alone (spendcap_lock_scope, postgres_grants.cpp).
    // gen_random_uuid() is strongly random (PostgreSQL 13 and later): two give 244 bits.
    R"sql(
CREATE TABLE scope_lock_salt (
  one BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),
  salt TEXT NOT NULL
);
REVOKE ALL ON scope_lock_salt FROM PUBLIC;
INSERT INTO scope_lock_salt (salt) VALUES (gen_random_uuid()::text || gen_random_uuid()::text);
)sql",
    // v22 (the 21st entry; issue 40 item 3): as SQLite's v22, spendcap's own exit status beside
    // the command's (exit_code). spendcap_finish and spendcap_update_run write it with the other
    // mutable columns (kMutableRunColumns).
    "ALTER TABLE runs ADD COLUMN spendcap_exit_code INTEGER;\n",
    // v23 (the 22nd entry; issues 38 item 4 and 40 item 4): as SQLite's v23, refused runs counted
    // per user and minute, keyed by the login role too (a role's user names are its client's
    // word), written only by spendcap_tally_refusal (postgres_grants.cpp); runners read it. And
    // routines() replaces spendcap_plan_grant by one with the fair share of a shared budget
    // (decide_grant) and spendcap_heartbeat by one that plans with the spend it reports.
    R"sql(
CREATE TABLE refused_counts (
  db_role TEXT NOT NULL,
  user_name TEXT NOT NULL,
  minute BIGINT NOT NULL,
  refused BIGINT NOT NULL,
  recorded BIGINT NOT NULL,
  last_at DOUBLE PRECISION NOT NULL,
  PRIMARY KEY (db_role, user_name, minute)
);
REVOKE ALL ON refused_counts FROM PUBLIC;
)sql",
    // v24 (the 23rd entry): changes nothing, and stays so: ledgers have recorded it as done, so a
    // change that needs a migration appends one after v25 instead of filling this entry.
    "SELECT 1;\n",
    // v25 (the 24th entry; issue 40 item 6): nothing changes in the tables; routines() adds
    // spendcap_set_tracker (a run's tag `tracker` from its progress channel, checked as the other
    // writes of a runner are) and replaces spendcap_heartbeat and spendcap_finish by ones that call
    // it (a ledger at v23 kept the old ones: routines() run only after a migration).
    "SELECT 1;\n",
    // v26 (the 25th entry; issue 40 item 7): as SQLite's v26, the cells rebuilt with v26's waste
    // (a killed run that wrote its checkpoint wastes only the spend after it, waste.hpp);
    // routines() installs the trigger function that keeps them so (rollup_sql's move_run).
    rollup_sql::rebuild(rollup_sql::Dialect::postgres, rollup_sql::Rules::v26),
    // v27 (the 26th entry, recorded as version 26; issue 40 item 7): as SQLite's v27, when a
    // running run is expected to have done its steps; routines() replaces spendcap_heartbeat and
    // spendcap_finish by ones that write it from the progress's seconds_left and the server's
    // clock. IF NOT EXISTS: a migration run again (a test that winds the version back) is harmless.
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS progress_eta_at DOUBLE PRECISION;\n",
};

const char* const kRunColumns =
    "id, job_key, team, experiment, project, user_name, tags, command, fingerprint, host, pid, "
    "mode, status, reason, exit_code, rate_micros_per_hour, reserve_micros, budget_micros, "
    "shutdown_ms, sync_ms, started_at, day, heartbeat_at, reconcile_at, finished_at, "
    "spend_micros, ceiling_micros, allowed_micros, reconciled, would_stop_at, would_stop_reason, "
    "elapsed_seconds, uid, reported_spend_micros, overrun, gpu_measured, gpu_not_measured, "
    "gpu_devices, gpu_allocated_seconds, gpu_busy_seconds, gpu_idle_spend_micros, "
    "gpu_energy_kwh, gpu_co2_kg, gpu_energy_cost_micros, gpu_sources, gpu_timeline, "
    "metric_name, metric_value, units, egress_gb, storage_peak_gb, storage_spend_micros, pricing, "
    "commitment_micros, cwd, run_budget_micros, budget_source, progress_step, "
    "progress_total_steps, progress_line, checkpoint_signal, checkpoint_signalled, "
    "checkpoint_signal_seconds, checkpoint_written_seconds, spendcap_exit_code, progress_eta_at";

namespace {

// What update_run writes (ledger_store.hpp): everything that may change after admission.
const char* const kMutableRunColumns[] = {
    "status",          "reason",
    "exit_code",       "heartbeat_at",
    "reconcile_at",    "finished_at",
    "spend_micros",    "ceiling_micros",
    "allowed_micros",  "reconciled",
    "would_stop_at",   "would_stop_reason",
    "elapsed_seconds", "reported_spend_micros",
    "overrun",         "spendcap_exit_code",
};
// The final row's checkpoint storage (v10), last progress line and checkpoint (v19) and its ETA
// (v27): written as the row carries it, like the above (every read of a run reads them).
const char* const kStorageRunColumns[] = {"storage_peak_gb",
                                          "storage_spend_micros",
                                          "progress_step",
                                          "progress_total_steps",
                                          "progress_line",
                                          "checkpoint_signal",
                                          "checkpoint_signalled",
                                          "checkpoint_signal_seconds",
                                          "checkpoint_written_seconds",
                                          "progress_eta_at"};

// Written by update_run only when the run carries them (as SQLite's): a GPU record (gpu_measured
// set), and the progress channel's last report (a metric, units or egress).
const char* const kGpuRunColumns[] = {
    "gpu_measured",           "gpu_not_measured",      "gpu_devices",    "gpu_allocated_seconds",
    "gpu_busy_seconds",       "gpu_idle_spend_micros", "gpu_energy_kwh", "gpu_co2_kg",
    "gpu_energy_cost_micros", "gpu_sources",           "gpu_timeline",
};
const char* const kProgressRunColumns[] = {"metric_name", "metric_value", "units", "egress_gb"};

}  // namespace

std::string routines() {
  std::string set_mutable;
  for (const char* column : kMutableRunColumns) {
    if (!set_mutable.empty()) set_mutable += ", ";
    set_mutable += std::string(column) + " = n." + column;
  }
  for (const char* column : kStorageRunColumns) {
    set_mutable += std::string(", ") + column + " = n." + column;
  }
  for (const char* column : kGpuRunColumns) {
    set_mutable += std::string(", ") + column + " = CASE WHEN has_gpu THEN n." + column +
                   " ELSE runs." + column + " END";
  }
  for (const char* column : kProgressRunColumns) {
    set_mutable += std::string(", ") + column + " = CASE WHEN has_progress THEN n." + column +
                   " ELSE runs." + column + " END";
  }
  return R"sql(
-- Whether the session's login role owns the ledger: it owns the schema, is a member of the role
-- that does, or is a superuser.
-- (PL/pgSQL keeps its plan: a SQL function is planned at every call, and every grant asks.)
CREATE OR REPLACE FUNCTION spendcap_caller_is_owner() RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
  RETURN (SELECT pg_has_role(session_user, n.nspowner, 'USAGE')
          FROM pg_namespace n WHERE n.nspname = current_schema());
END $$;

-- The usage rows follow the runs: a run adds to the row of each named scope for its start day
-- (spent: finished spend; held: an unfinished run's ceiling; live: its reported spend).
CREATE OR REPLACE FUNCTION spendcap_add_run_usage(r runs, sign integer) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  running boolean := r.status = 'running';
  spent bigint := sign * CASE WHEN running THEN 0 ELSE r.spend_micros END;
  held bigint := sign * CASE WHEN running THEN r.ceiling_micros ELSE 0 END;
  live bigint := sign * CASE WHEN running THEN r.usage_live_micros ELSE 0 END;
  scope record;
BEGIN
  IF spent = 0 AND held = 0 AND live = 0 THEN RETURN; END IF;
  FOR scope IN SELECT * FROM (VALUES (1, 'team', r.team), (2, 'experiment', r.experiment),
      (3, 'project', r.project), (4, 'user', r.user_name)) AS s(k, kind, name)
      WHERE name <> '' ORDER BY k LOOP
    INSERT INTO usage AS u (scope_kind, scope_name, day, spent_micros, held_micros, live_micros)
    VALUES (scope.kind, scope.name, r.day, spent, held, live)
    ON CONFLICT (scope_kind, scope_name, day) DO UPDATE SET
      spent_micros = u.spent_micros + excluded.spent_micros,
      held_micros = u.held_micros + excluded.held_micros,
      live_micros = u.live_micros + excluded.live_micros;
  END LOOP;
END $$;

CREATE OR REPLACE FUNCTION spendcap_runs_usage() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  -- An unfinished run's own spend is not in the sums (usage_live_micros is): a heartbeat that
  -- raises nothing leaves them alone.
  IF TG_OP = 'UPDATE' AND OLD.status = NEW.status
     AND (NEW.status = 'running' OR OLD.spend_micros = NEW.spend_micros)
     AND OLD.usage_live_micros = NEW.usage_live_micros
     AND OLD.ceiling_micros = NEW.ceiling_micros AND OLD.day = NEW.day AND OLD.team = NEW.team
     AND OLD.experiment = NEW.experiment AND OLD.project = NEW.project
     AND OLD.user_name = NEW.user_name THEN
    RETURN NULL;
  END IF;
  IF TG_OP IN ('UPDATE', 'DELETE') THEN PERFORM spendcap_add_run_usage(OLD, -1); END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN PERFORM spendcap_add_run_usage(NEW, 1); END IF;
  RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS runs_usage ON runs;
CREATE TRIGGER runs_usage AFTER INSERT OR UPDATE OR DELETE ON runs
  FOR EACH ROW EXECUTE FUNCTION spendcap_runs_usage();

-- The rollups follow the finished runs (rollup.hpp): a finished row leaves its cells as it was and
-- enters them as it is, so a replayed final row replaces a reconciled run's charge once. The WHEN
-- clauses keep heartbeats (an unfinished row staying unfinished) out of the function.
CREATE OR REPLACE FUNCTION spendcap_runs_rollup() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.status <> 'running' THEN
)sql" + rollup_sql::move_run(rollup_sql::Dialect::postgres, "OLD", -1) +
         R"sql(
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.status <> 'running' THEN
)sql" + rollup_sql::move_run(rollup_sql::Dialect::postgres, "NEW", 1) +
         R"sql(
  END IF;
  RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS runs_rollup_insert ON runs;
CREATE TRIGGER runs_rollup_insert AFTER INSERT ON runs
  FOR EACH ROW WHEN (NEW.status <> 'running') EXECUTE FUNCTION spendcap_runs_rollup();
DROP TRIGGER IF EXISTS runs_rollup_update ON runs;
CREATE TRIGGER runs_rollup_update AFTER UPDATE ON runs
  FOR EACH ROW WHEN (OLD.status <> 'running' OR NEW.status <> 'running')
  EXECUTE FUNCTION spendcap_runs_rollup();
DROP TRIGGER IF EXISTS runs_rollup_delete ON runs;
CREATE TRIGGER runs_rollup_delete AFTER DELETE ON runs
  FOR EACH ROW WHEN (OLD.status <> 'running') EXECUTE FUNCTION spendcap_runs_rollup();

-- A new run, recorded with the caller's login role.
CREATE OR REPLACE FUNCTION spendcap_insert_run(r json) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  n runs := json_populate_record(NULL::runs, r);
BEGIN
  -- A runner admits through spendcap_admit, which decides the ceiling; here it only records a
  -- run refused before it reached the ledger (record_refused).
  IF NOT spendcap_caller_is_owner() AND NOT (n.status = 'refused' AND n.spend_micros = 0
      AND n.ceiling_micros = 0 AND n.allowed_micros = 0 AND n.reconciled = 0) THEN
    RAISE EXCEPTION 'a runner records only refused runs here, with nothing spent or held (it is '
      'admitted through spendcap_admit)' USING ERRCODE = 'insufficient_privilege';
  END IF;
  n.db_role := session_user;
  n.usage_live_micros := CASE WHEN n.status = 'running' THEN n.spend_micros ELSE 0 END;
  INSERT INTO runs SELECT n.*;
END $$;

-- What may change after admission. A runner changes its own unfinished runs (and replaces the
-- charge of its own reconciled one); another's run only to charge it its ceiling once it is lost
-- and due by the server's clock.
CREATE OR REPLACE FUNCTION spendcap_update_run(r json) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  n runs := json_populate_record(NULL::runs, r);
  o runs;
  -- Written only by the run's own wrapper (or the owner), and only when it carries them.
  has_gpu boolean := n.gpu_measured IS NOT NULL;
  has_progress boolean := n.metric_name IS NOT NULL OR n.units IS NOT NULL
                          OR n.egress_gb IS NOT NULL;
BEGIN
  SELECT * INTO o FROM runs WHERE id = n.id FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'no run %', n.id USING ERRCODE = 'no_data_found';
  END IF;
  IF NOT spendcap_caller_is_owner() THEN
    IF n.spend_micros < 0 OR n.ceiling_micros < 0 THEN
      RAISE EXCEPTION 'run %: spend and ceiling are never negative', n.id
        USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF o.db_role = session_user THEN
      IF o.status <> 'running' AND o.reconciled = 0 THEN
        RAISE EXCEPTION 'run % is final: its row cannot change', n.id
          USING ERRCODE = 'insufficient_privilege';
      END IF;
      -- Its ceiling moves only by the rule (spendcap_heartbeat); while it runs its spend never
      -- goes below what it reported, and never above what its rate could have spent since
      -- admission by the server's clock (2 s of slack for the wrapper's).
      IF n.ceiling_micros <> o.ceiling_micros OR n.allowed_micros <> o.allowed_micros THEN
        RAISE EXCEPTION 'run %: its ceiling is raised only by spendcap_heartbeat', n.id
          USING ERRCODE = 'insufficient_privilege';
      END IF;
      -- (A final row may be below: measured billing charges busy GPU time, never above the
      -- allocated spend the heartbeats reported.)
      IF n.status = 'running' AND n.spend_micros < o.reported_spend_micros THEN
        RAISE EXCEPTION 'run %: spend % is below the % it reported before', n.id,
          n.spend_micros, o.reported_spend_micros USING ERRCODE = 'insufficient_privilege';
      END IF;
      IF n.spend_micros::numeric > o.rate_micros_per_hour::numeric * (greatest(
           extract(epoch FROM clock_timestamp())::double precision - o.started_at, 0) + 2)::numeric
           / 3600 + 1 THEN
        RAISE EXCEPTION 'run %: spend % is above what % an hour can spend since it was admitted',
          n.id, n.spend_micros, o.rate_micros_per_hour USING ERRCODE = 'insufficient_privilege';
      END IF;
    ELSIF NOT (o.status = 'running' AND n.status = 'lost' AND n.reconciled = 1
               AND n.spend_micros = o.ceiling_micros AND n.ceiling_micros = o.ceiling_micros
               AND o.reconcile_at <= extract(epoch FROM clock_timestamp())) THEN
      RAISE EXCEPTION 'run % was admitted by %, not by %', n.id, o.db_role, session_user
        USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF o.db_role <> session_user THEN
      has_gpu := false;
      has_progress := false;
    END IF;
  END IF;
  UPDATE runs SET )sql" +
         set_mutable + R"sql(,
    usage_live_micros = CASE WHEN n.status = 'running' THEN n.spend_micros
                             ELSE runs.usage_live_micros END
  WHERE id = n.id;
END $$;

-- Stop orders, accepted results and lost runs' events: who may (issue 19).
)sql" + grant_routines() +
         access_routines() +
         R"sql(
-- The webhook outbox: each login role sees, stores, retries and deletes only its own entries; the
-- ledger's owner all of them.
DROP POLICY IF EXISTS outbox_own ON outbox;
CREATE POLICY outbox_own ON outbox
  USING (db_role = session_user OR spendcap_caller_is_owner())
  WITH CHECK (db_role = session_user OR spendcap_caller_is_owner());

-- The runner role: reads everything (the outbox: its own entries), writes only through the
-- functions above (the outbox: its own entries, by row-level security).
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'spendcap_runner') THEN
    BEGIN
      CREATE ROLE spendcap_runner NOLOGIN;
    EXCEPTION WHEN insufficient_privilege THEN
      RETURN;  -- the database's administrator creates it
    END;
  END IF;
  EXECUTE format('GRANT USAGE ON SCHEMA %I TO spendcap_runner', current_schema());
  GRANT SELECT ON runs, budgets, usage, stop_orders, schema_version, accepted_results, rollups,
    rollup_metrics TO spendcap_runner;
  GRANT EXECUTE ON FUNCTION spendcap_caller_is_owner(), spendcap_insert_run(json),
    spendcap_update_run(json), spendcap_place_stop_order(text, text, text, text, double precision),
    spendcap_clear_stop_orders(text, text, double precision),
    spendcap_accept_result(text, text, text, double precision),
    spendcap_admit(json, bigint, json, double precision),
    spendcap_heartbeat(text, bigint, bigint, json, double precision, json),
    spendcap_finish(json, double precision), spendcap_schema_version(),
    spendcap_lock_scopes(text[], double precision),
    spendcap_count_refusal(text, double precision), spendcap_set_tracker(text, text)
    TO spendcap_runner;
  -- The id and db_role come from their defaults; of a stored entry only a failed flush's
  -- attempts and error change, and who claimed it for delivery until when.
  GRANT SELECT, DELETE ON outbox TO spendcap_runner;
  GRANT INSERT (event_id, event, run_id, user_name, destination, format, secret_env, body,
    created_at, attempts, last_error) ON outbox TO spendcap_runner;
  GRANT UPDATE (attempts, last_error, claimed_by, claimed_until) ON outbox TO spendcap_runner;
  GRANT USAGE ON SEQUENCE outbox_id_seq TO spendcap_runner;
  -- Budget warnings announced (v15): a runner records the thresholds its run announced.
  IF to_regclass('budget_warnings') IS NOT NULL THEN
    GRANT SELECT, INSERT ON budget_warnings TO spendcap_runner;
  END IF;
  -- Refused runs counted (v23): read by runners, written through spendcap_count_refusal.
  IF to_regclass('refused_counts') IS NOT NULL THEN
    GRANT SELECT ON refused_counts TO spendcap_runner;
  END IF;
END $$;
REVOKE ALL ON FUNCTION spendcap_insert_run(json), spendcap_update_run(json),
  spendcap_place_stop_order(text, text, text, text, double precision),
  spendcap_clear_stop_orders(text, text, double precision),
  spendcap_accept_result(text, text, text, double precision),
  spendcap_add_run_usage(runs, integer), spendcap_runs_rollup(), spendcap_admit(json, bigint, json, double precision),
  spendcap_heartbeat(text, bigint, bigint, json, double precision, json),
  spendcap_finish(json, double precision), spendcap_schema_version(),
  spendcap_clock(double precision), spendcap_lock_scope(text, text),
  spendcap_lock_scopes(text[], double precision),
  spendcap_reconcile_due(double precision), spendcap_rule_in_force(text, text, json),
  spendcap_plan_grant(runs, bigint, json, boolean), spendcap_first_stop_order(runs),
  spendcap_count_unfinished(text, text, bigint, bigint),
  spendcap_tally_refusal(text, double precision),
  spendcap_count_refusal(text, double precision), spendcap_set_tracker(text, text),
  spendcap_progress_eta(double precision, double precision) FROM PUBLIC;
)sql" + access_grants();
}

}  // namespace spendcap::postgres_schema
