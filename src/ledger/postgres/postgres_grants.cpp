// The grant rule in the server (issue 23): admission and heartbeats as one call each, so that a
// runner makes one round trip per heartbeat and cannot choose its own ceiling. Every function
// here mirrors BudgetLedger (budget_ledger.cpp) and decide_grant (grant_rule.cpp) step by step;
// the conformance suite runs both on the same cases. Contract in postgres_schema.hpp.
#include "postgres_schema.hpp"

#include <nlohmann/json.hpp>

namespace spendcap::postgres_schema {

std::string grant_routines() {
  return R"sql(
-- stale_after(sync) in seconds (ledger.cpp): max(3 x sync, sync + 2 s), from whole milliseconds
-- as the C++ does it (nanoseconds, then one division), so both give the same doubles.
CREATE OR REPLACE FUNCTION spendcap_stale_seconds(sync_ms bigint) RETURNS double precision
LANGUAGE sql IMMUTABLE AS $$
  SELECT greatest(3 * sync_ms * 1000000, sync_ms * 1000000 + 2000000000)::double precision / 1e9
$$;

-- reconcile_at (grant_rule.cpp), with time_to_cost's rounding up to whole nanoseconds.
-- The pure helpers on the grant path (this one, spendcap_period_days, spendcap_named_scopes,
-- spendcap_lock_scope) are SQL functions simple enough for the planner to inline into the
-- statement that calls them (one expression, or one SELECT for a table function; no SET clause,
-- not SECURITY DEFINER): nothing is planned or compiled per call, nor per new backend, as a
-- PL/pgSQL function is at its first call (schema version 16; a SQL function the planner cannot
-- inline is planned at every call, which is why the others stay PL/pgSQL).
CREATE OR REPLACE FUNCTION spendcap_reconcile_at(hb double precision, ceiling bigint,
    spend bigint, rate bigint, shutdown_ms bigint, sync_ms bigint) RETURNS double precision
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN rate <= 0
    THEN hb + spendcap_stale_seconds(sync_ms) + (shutdown_ms * 1000000)::double precision / 1e9
    ELSE hb + greatest(spendcap_stale_seconds(sync_ms),
      least(CASE WHEN ceiling - spend > 0
                 THEN div((ceiling - spend)::numeric * 3600000000000 + rate - 1, rate)
                 ELSE 0 END, 9223372036854775807)::bigint::double precision / 1e9
      + (shutdown_ms * 1000000)::double precision / 1e9) END
$$;

-- The days of the period that contains `day` (period_days): one row. (A set-returning function,
-- so that `FROM spendcap_period_days(...)` inlines; v15's was PL/pgSQL with OUT parameters.)
DROP FUNCTION IF EXISTS spendcap_period_days(text, bigint);
CREATE FUNCTION spendcap_period_days(period text, day bigint)
RETURNS TABLE (first_day bigint, last_day bigint)
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE period WHEN 'day' THEN day
           WHEN 'week' THEN day - ((day + 3) % 7 + 7) % 7
           WHEN 'month' THEN date_trunc('month', (date '1970-01-01' + day::integer)::timestamp)::date
                             - date '1970-01-01'
           ELSE -9223372036854775808 END,
         CASE period WHEN 'day' THEN day
           WHEN 'week' THEN day - ((day + 3) % 7 + 7) % 7 + 6
           WHEN 'month' THEN (date_trunc('month', (date '1970-01-01' + day::integer)::timestamp)
                              + interval '1 month')::date - date '1970-01-01' - 1
           ELSE 9223372036854775807 END
$$;

-- The helpers below (to spendcap_count_unfinished) run only inside the SECURITY DEFINER functions
-- (they are revoked from PUBLIC), whose own SET search_path is in force while they run: they set
-- none of their own. A function's SET clause costs a configuration save and restore at every call
-- (a heartbeat made seven): without them a heartbeat's backend spent 7 to 19% less CPU (3,000
-- calls, three pairs: 0.35 to 0.50 ms a call against 0.40 to 0.54 ms).
-- The ledger's clock: the server's, or (the ledger's owner only: the tests' clock) the one given.
CREATE OR REPLACE FUNCTION spendcap_clock(at double precision) RETURNS double precision
LANGUAGE plpgsql AS $$
BEGIN
  IF at IS NULL THEN RETURN extract(epoch FROM clock_timestamp())::double precision; END IF;
  IF NOT spendcap_caller_is_owner() THEN
    RAISE EXCEPTION 'only the ledger''s owner may give the ledger''s clock'
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN at;
END $$;

-- A run's named scopes in BudgetLedger's sorted order (team < experiment < project < user: one
-- of each kind, so the order of kinds is the order).
CREATE OR REPLACE FUNCTION spendcap_named_scopes(r runs)
RETURNS TABLE (k integer, kind text, name text)
LANGUAGE sql IMMUTABLE AS $$
  SELECT s.k, s.kind, s.name FROM (VALUES (1, 'team', r.team), (2, 'experiment', r.experiment),
      (3, 'project', r.project), (4, 'user', r.user_name)) AS s(k, kind, name)
    WHERE s.name <> '' ORDER BY s.k
$$;

-- Charges every lost run that is due its ceiling (reconcile in budget_ledger.cpp).
CREATE OR REPLACE FUNCTION spendcap_reconcile_due(now double precision) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  s record;
  charged integer;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM runs WHERE status = 'running' AND reconcile_at <= now) THEN
    RETURN 0;
  END IF;
  FOR s IN SELECT DISTINCT n.k, n.kind, n.name COLLATE "C" AS name
      FROM runs r, LATERAL spendcap_named_scopes(r) n
      WHERE r.status = 'running' AND r.reconcile_at <= now
        AND now - r.heartbeat_at > spendcap_stale_seconds(r.sync_ms)
      ORDER BY 1, 3 LOOP
    PERFORM spendcap_lock_scope(s.kind, s.name);
  END LOOP;
  UPDATE runs SET status = 'lost', reconciled = 1, reason = 'lost: no heartbeat',
    spend_micros = ceiling_micros, finished_at = reconcile_at
  WHERE status = 'running' AND reconcile_at <= now
    AND now - heartbeat_at > spendcap_stale_seconds(sync_ms);
  GET DIAGNOSTICS charged = ROW_COUNT;
  RETURN charged;
END $$;

-- The budget rule in force for a scope: its row, lowered by a locked policy's cap
-- (rule_in_force). caps: [{"kind", "name", "amount", "period", "max_run"}].
CREATE OR REPLACE FUNCTION spendcap_rule_in_force(kind text, name text, caps json,
    OUT amount bigint, OUT period text, OUT max_run bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
  b budgets;
  c json;
BEGIN
  SELECT * INTO b FROM budgets WHERE scope_kind = kind AND scope_name = name;
  SELECT e INTO c FROM json_array_elements(COALESCE(caps, '[]'::json)) e
    WHERE e->>'kind' = kind AND e->>'name' = name LIMIT 1;
  IF c IS NULL THEN
    amount := b.amount_micros; period := b.period; max_run := b.max_run_micros;
    RETURN;
  END IF;
  period := c->>'period';
  max_run := (c->>'max_run')::bigint;
  amount := (c->>'amount')::bigint;
  IF b.scope_kind IS NULL THEN RETURN; END IF;
  amount := least(b.amount_micros, amount);
  IF b.max_run_micros IS NOT NULL THEN
    max_run := CASE WHEN max_run IS NULL THEN b.max_run_micros
                    ELSE least(b.max_run_micros, max_run) END;
  END IF;
END $$;

-- plan_grant and decide_grant: takes the scopes' locks (unless `no_locks`: a heartbeat that asks
-- for nothing more), reads what the grant depends on and returns the plan as JSON:
-- {"scopes": [{kind, name, amount, period, first, last, spent, held, live, headroom,
--  other_runs}], "run_budget", "lowered_by_kind", "lowered_by_name", "own_kind", "own_name",
--  "own_headroom", "job_others", "ceiling", "allowed", "binding_kind", "binding_name",
--  "fair_share"}. r.spend_micros is the spend now (the heartbeat's report): near_term_need's.
CREATE OR REPLACE FUNCTION spendcap_plan_grant(r runs, want bigint, caps json, no_locks boolean)
RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
  s record;
  rule record;
  days record;
  sums record;
  holding boolean := r.status = 'running';
  own_ceiling bigint := CASE WHEN holding THEN r.ceiling_micros ELSE 0 END;
  old_allowed bigint := CASE WHEN holding THEN r.allowed_micros ELSE 0 END;
  scopes json[] := '{}';
  headroom bigint;
  run_budget bigint := r.budget_micros;
  lowered_kind text;
  lowered_name text;
  job_others bigint := 0;
  own_kind text;
  own_name text;
  own_headroom bigint;
  lim bigint := want;
  binding_kind text;
  binding_name text;
  allowed bigint;
  ceiling bigint;
  -- The fair share (decide_grant): other runs are counted only for a raise.
  raising boolean := want > own_ceiling;
  need bigint := least(want, r.spend_micros + r.reserve_micros + CASE
    WHEN r.rate_micros_per_hour <= 0 THEN 0
    ELSE least(div(r.rate_micros_per_hour::numeric * (2 * r.sync_ms * 1000000)
                   + 3599999999999, 3600000000000), 9223372036854775807)::bigint END);
  other_runs bigint;
  share bigint;
  scope_lim bigint;
  cut boolean;
  fair boolean := false;
BEGIN
  IF NOT no_locks THEN
    FOR s IN SELECT * FROM spendcap_named_scopes(r) LOOP
      PERFORM spendcap_lock_scope(s.kind, s.name);
    END LOOP;
  END IF;
  FOR s IN SELECT * FROM spendcap_named_scopes(r) LOOP
    SELECT * INTO rule FROM spendcap_rule_in_force(s.kind, s.name, caps);
    IF rule.amount IS NULL THEN CONTINUE; END IF;
    SELECT * INTO days FROM spendcap_period_days(rule.period, r.day);
    SELECT COALESCE(SUM(spent_micros), 0)::bigint AS spent,
           COALESCE(SUM(held_micros), 0)::bigint AS held,
           COALESCE(SUM(live_micros), 0)::bigint AS live INTO sums
      FROM usage WHERE scope_kind = s.kind AND scope_name = s.name
        AND day BETWEEN days.first_day AND days.last_day;
    headroom := rule.amount - (sums.spent + sums.held - own_ceiling);
    scope_lim := headroom;
    cut := false;
    other_runs := NULL;
    IF raising THEN
      other_runs := spendcap_count_unfinished(s.kind, s.name, days.first_day, days.last_day)
                    - CASE WHEN holding THEN 1 ELSE 0 END;
      -- fair_share(free, other_runs): free / (other runs + 2), free = headroom - own ceiling.
      share := greatest(headroom - own_ceiling, 0) / (greatest(other_runs, 0) + 2);
      IF want - own_ceiling > share AND need < headroom THEN
        scope_lim := greatest(need, own_ceiling); cut := true;
      END IF;
    END IF;
    IF scope_lim < lim THEN
      lim := scope_lim; binding_kind := s.kind; binding_name := s.name; fair := cut;
    END IF;
    IF rule.max_run IS NOT NULL AND (run_budget IS NULL OR rule.max_run < run_budget) THEN
      run_budget := rule.max_run; lowered_kind := s.kind; lowered_name := s.name;
    END IF;
    scopes := scopes || json_build_object('kind', s.kind, 'name', s.name,
      'amount', rule.amount, 'period', rule.period, 'first', days.first_day,
      'last', days.last_day, 'spent', sums.spent, 'held', sums.held, 'live', sums.live,
      'headroom', headroom, 'other_runs', other_runs);
  END LOOP;
  IF run_budget IS NOT NULL THEN
    IF COALESCE(r.job_key, '') <> '' THEN
      SELECT COALESCE(SUM(CASE WHEN status = 'running' THEN ceiling_micros
                               ELSE spend_micros END), 0)::bigint INTO job_others
        FROM runs WHERE job_key = r.job_key AND id <> r.id;
      own_kind := 'job'; own_name := r.job_key;
    ELSE
      own_kind := 'run'; own_name := r.id;
    END IF;
    own_headroom := run_budget - job_others;
    IF own_headroom < lim THEN
      lim := own_headroom; binding_kind := own_kind; binding_name := own_name; fair := false;
    END IF;
  END IF;
  allowed := greatest(old_allowed, greatest(lim, 0));
  IF allowed >= want THEN binding_kind := NULL; binding_name := NULL; fair := false; END IF;
  ceiling := CASE WHEN r.mode = 'enforce' THEN greatest(own_ceiling, allowed)
                  ELSE greatest(own_ceiling, want) END;
  RETURN json_build_object('scopes', array_to_json(scopes), 'run_budget', run_budget,
    'lowered_by_kind', lowered_kind, 'lowered_by_name', lowered_name, 'own_kind', own_kind,
    'own_name', own_name, 'own_headroom', own_headroom, 'job_others', job_others,
    'ceiling', ceiling, 'allowed', allowed, 'binding_kind', binding_kind,
    'binding_name', binding_name, 'fair_share', fair);
END $$;

-- The oldest active stop order on any scope of the run (stop_scopes), as JSON, or NULL.
CREATE OR REPLACE FUNCTION spendcap_first_stop_order(r runs) RETURNS json
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN (SELECT json_build_object('id', id, 'kind', scope_kind, 'name', scope_name,
      'reason', reason, 'placed_by', placed_by, 'placed_at', placed_at)
    FROM stop_orders WHERE cleared_at IS NULL AND (
      (scope_kind = 'team' AND scope_name = r.team)
      OR (scope_kind = 'experiment' AND scope_name = r.experiment)
      OR (scope_kind = 'project' AND scope_name = r.project)
      OR (scope_kind = 'user' AND scope_name = r.user_name)
      OR (scope_kind = 'job' AND scope_name = COALESCE(r.job_key, ''))
      OR (scope_kind = 'run' AND scope_name = r.id))
    ORDER BY id LIMIT 1);
END $$;

-- Unfinished runs of a scope that started in [first, last] (count_unfinished).
CREATE OR REPLACE FUNCTION spendcap_count_unfinished(kind text, name text, first bigint,
    last bigint) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN (SELECT count(*) FROM runs WHERE status = 'running' AND day BETWEEN first AND last AND
    CASE kind WHEN 'team' THEN team WHEN 'experiment' THEN experiment
      WHEN 'project' THEN project WHEN 'user' THEN user_name END = name);
END $$;

-- Refused runs, rate-limited per login role and user (ledger.hpp's kRecordedRefusalsPerMinute,
-- SQLite's count_refusal): counts one in the minute of `now`; "recorded": the caller stores its
-- row. The row's lock orders two refusals of the same user in the same minute.
CREATE OR REPLACE FUNCTION spendcap_tally_refusal(who text, now double precision) RETURNS json
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  c refused_counts;
BEGIN
  INSERT INTO refused_counts AS t (db_role, user_name, minute, refused, recorded, last_at)
    VALUES (session_user, who, floor(now / 60)::bigint, 1, 1, now)
  ON CONFLICT (db_role, user_name, minute) DO UPDATE SET refused = t.refused + 1,
    recorded = t.recorded + CASE WHEN t.recorded < )sql" +
         std::to_string(kRecordedRefusalsPerMinute) + R"sql( THEN 1 ELSE 0 END,
    last_at = excluded.last_at
  RETURNING * INTO c;
  RETURN json_build_object('this_minute', c.refused, 'recorded', c.refused = c.recorded);
END $$;

-- A run refused before it reached the ledger (record_refused), counted by the server's clock.
CREATE OR REPLACE FUNCTION spendcap_count_refusal(who text, at double precision) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
  RETURN spendcap_tally_refusal(who, spendcap_clock(at));
END $$;

-- Admission (BudgetLedger::begin_run) in one call. `r` is the run's record as the client built
-- it (run_json); the server sets its clock, status, ceiling and login role. Returns
-- {"error"} ("exists", "no budget") or {"now", "admitted", "fits", "plan", "stop",
-- "unfinished", "job_spent_before", "job_budget_before", "job_owner", "refusal"}. A refused run
-- is recorded refused, with the reason, unless its user is past the minute's limit ("refusal":
-- spendcap_tally_refusal's answer; null when admitted); the message is the client's
-- (refusal_message), from what this returns.
CREATE OR REPLACE FUNCTION spendcap_admit(r json, want bigint, caps json, at double precision)
RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  n runs := json_populate_record(NULL::runs, r);
  now double precision := spendcap_clock(at);
  plan json;
  stop json;
  fits boolean;
  unfinished bigint := 0;
  job_spent bigint := 0;
  job_budget bigint;
  key_owner runs;
  job_owner json;
  sc json;
  tally json;
BEGIN
  IF want < 0 OR n.rate_micros_per_hour < 0 OR n.reserve_micros < 0
     OR COALESCE(n.budget_micros, 0) < 0 THEN
    RAISE EXCEPTION 'run %: negative amount of money', n.id
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  PERFORM spendcap_reconcile_due(now);
  IF EXISTS (SELECT 1 FROM runs WHERE id = n.id) THEN
    RETURN json_build_object('error', 'exists');
  END IF;
  n.status := 'refused';
  n.reason := COALESCE(n.reason, '');
  n.started_at := now;
  n.heartbeat_at := now;
  n.day := floor(now / 86400.0)::bigint;
  n.spend_micros := 0; n.ceiling_micros := 0; n.allowed_micros := 0; n.reported_spend_micros := 0;
  n.usage_live_micros := 0;
  n.reconciled := 0; n.overrun := 0; n.finished_at := NULL; n.exit_code := NULL;
  n.would_stop_at := NULL; n.would_stop_reason := '';
  n.db_role := session_user;
  plan := spendcap_plan_grant(n, want, caps, false);
  IF plan->>'run_budget' IS NULL AND json_array_length(plan->'scopes') = 0 THEN
    RETURN json_build_object('error', 'no budget');
  END IF;
  -- The budget in effect and where it came from, in budget_source_text's words (ledger.hpp).
  n.run_budget_micros := (plan->>'run_budget')::bigint;
  n.budget_source := CASE
    WHEN plan->>'lowered_by_kind' IS NOT NULL THEN
      'max_run of ' || (plan->>'lowered_by_kind') || ':' || (plan->>'lowered_by_name')
    WHEN n.budget_micros IS NOT NULL THEN
      CASE WHEN COALESCE(n.job_key, '') = '' THEN 'flag --budget'
           ELSE 'flag --budget of job ' || n.job_key END
    ELSE COALESCE('budgets of ' || (SELECT string_agg((ps.value->>'kind') || ':' ||
        (ps.value->>'name'), ', ' ORDER BY ps.ordinality)
      FROM json_array_elements(plan->'scopes') WITH ORDINALITY AS ps), 'none') END;
  IF COALESCE(n.job_key, '') <> '' THEN
    SELECT COALESCE(SUM(CASE WHEN status <> 'running' THEN spend_micros ELSE 0 END), 0)::bigint
      INTO job_spent FROM runs WHERE job_key = n.job_key AND id <> n.id;
    SELECT budget_micros INTO job_budget FROM runs
      WHERE job_key = n.job_key AND id <> n.id AND budget_micros IS NOT NULL
      ORDER BY started_at DESC LIMIT 1;
  END IF;
  stop := spendcap_first_stop_order(n);
  -- A job key is its first admitted run's team's and user's (stop_rule.hpp, why_not_join_job).
  IF COALESCE(n.job_key, '') <> '' THEN
    SELECT * INTO key_owner FROM runs WHERE job_key = n.job_key AND id <> n.id
      AND status <> 'refused' ORDER BY started_at, id LIMIT 1;
    IF FOUND AND (key_owner.team IS DISTINCT FROM n.team
                  OR key_owner.user_name IS DISTINCT FROM n.user_name
                  OR key_owner.db_role IS DISTINCT FROM n.db_role) THEN
      job_owner := json_build_object('id', key_owner.id, 'team', key_owner.team,
                                     'user', key_owner.user_name);
    END IF;
  END IF;
  fits := (plan->>'allowed')::bigint > n.reserve_micros;
  IF plan->>'binding_kind' IS NOT NULL THEN
    FOR sc IN SELECT * FROM json_array_elements(plan->'scopes') LOOP
      IF sc->>'kind' = plan->>'binding_kind' AND sc->>'name' = plan->>'binding_name' THEN
        unfinished := spendcap_count_unfinished(sc->>'kind', sc->>'name', (sc->>'first')::bigint,
                                                (sc->>'last')::bigint);
      END IF;
    END LOOP;
  END IF;
  IF job_owner IS NOT NULL THEN
    n.reason := 'refused: job key ' || n.job_key || ' is another''s';
    n.finished_at := now;
  ELSIF stop IS NOT NULL THEN
    n.reason := 'refused: stop order on ' || (stop->>'kind') || ':' || (stop->>'name');
    n.finished_at := now;
  ELSIF NOT fits AND n.mode = 'enforce' THEN
    -- As refusal_reason (budget_ledger.cpp): the run's own budget short is its reserve.
    n.reason := CASE WHEN plan->>'binding_kind' = 'run'
                THEN 'refused: shutdown reserve exceeds the run budget'
                ELSE 'refused: budget' || COALESCE(' ' || (plan->>'binding_kind') || ':'
                                                   || (plan->>'binding_name'), '') END;
    n.finished_at := now;
  ELSE
    n.status := 'running';
    n.ceiling_micros := (plan->>'ceiling')::bigint;
    n.allowed_micros := (plan->>'allowed')::bigint;
    n.reconcile_at := spendcap_reconcile_at(now, n.ceiling_micros, 0, n.rate_micros_per_hour,
                                            n.shutdown_ms, n.sync_ms);
  END IF;
  IF n.status <> 'running' THEN
    n.reconcile_at := 0;
    tally := spendcap_tally_refusal(n.user_name, now);
  END IF;
  IF tally IS NULL OR (tally->>'recorded')::boolean THEN
    INSERT INTO runs SELECT n.*;
  END IF;
  RETURN json_build_object('now', now, 'admitted', n.status = 'running', 'fits', fits,
    'plan', plan, 'stop', stop, 'unfinished', unfinished, 'job_spent_before', job_spent,
    'job_budget_before', job_budget, 'job_owner', job_owner, 'refusal', tally);
END $$;

-- The run's tag `tracker` set to the experiment tracker's run id its progress channel reported
-- (schema v25; HeartbeatProgress::tracker, StoreTxn::set_run_tracker), its other tags as they are.
-- A runner's login role sets it only on the runs it admitted, while they run or once reconciled
-- lost (before their final row). The id is 1 to 256 bytes of printable ASCII without spaces (a
-- tag's value limit at admission; tracker labels joined by commas). spendcap_heartbeat and
-- spendcap_finish call it; a store's transaction may too.
CREATE OR REPLACE FUNCTION spendcap_set_tracker(run_id text, tracker text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  o runs;
BEGIN
  SELECT * INTO o FROM runs WHERE id = run_id FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'no run %', run_id USING ERRCODE = 'no_data_found';
  END IF;
  IF tracker IS NULL OR octet_length(tracker) NOT BETWEEN 1 AND 256 OR tracker !~ '^[!-~]+$' THEN
    RAISE EXCEPTION 'run %: a tracker id is 1 to 256 printable ASCII characters', run_id
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF NOT spendcap_caller_is_owner() THEN
    IF o.db_role <> session_user THEN
      RAISE EXCEPTION 'run % was admitted by %, not by %', run_id, o.db_role, session_user
        USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF o.status <> 'running' AND o.reconciled = 0 THEN
      RAISE EXCEPTION 'run % is final: its row cannot change', run_id
        USING ERRCODE = 'insufficient_privilege';
    END IF;
  END IF;
  IF (o.tags::json)->>'tracker' IS NOT DISTINCT FROM tracker THEN RETURN; END IF;
  UPDATE runs SET tags = (o.tags::jsonb || jsonb_build_object('tracker', tracker))::text
  WHERE id = run_id;
END $$;

-- When a run `seconds_left` from the end of its steps is expected to have done them, on the
-- ledger's clock `now` (schema v27; ledger.hpp's progress_eta_of): seconds_left within 0 and
-- kMaxProgressSecondsLeft (NaN, which sorts above every number, as the bound); NULL without one.
CREATE OR REPLACE FUNCTION spendcap_progress_eta(now double precision,
                                                 seconds_left double precision)
RETURNS double precision LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN seconds_left IS NULL THEN NULL
              ELSE now + LEAST(GREATEST(seconds_left, 0), )sql" +
         std::to_string(static_cast<std::int64_t>(kMaxProgressSecondsLeft)) + R"sql() END
$$;

-- A heartbeat (BudgetLedger::heartbeat) in one call: the spend reported, the ceiling raised by
-- the rule. A runner's login role heartbeats only the runs it admitted, never reports less than
-- it reported before, nor more than the run's rate could have spent by the server's clock since
-- admission (2 s of slack for the wrapper's clock). A heartbeat that asks for no more than it
-- holds takes no scope lock and writes only the run's row (usage's live sums follow at the next
-- raise or the final row: usage_live_micros). `progress` (null: none) is the run's last progress
-- line and metric so far (HeartbeatProgress: step, total_steps, line, metric_name, metric_value,
-- from v25 tracker: the tag `tracker` then set by spendcap_set_tracker, and from v27 seconds_left:
-- progress_eta_at, the server's now + seconds_left, NULL without one).
-- Returns {"now", "running", "plan", "stop", "live_delta", "held_delta", "ceiling", "allowed"}.
-- (Schema 19 added `progress`: the function without it is dropped.)
DROP FUNCTION IF EXISTS spendcap_heartbeat(text, bigint, bigint, json, double precision);
CREATE OR REPLACE FUNCTION spendcap_heartbeat(run_id text, spend bigint, want bigint, caps json,
                                              at double precision, progress json) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  now double precision := spendcap_clock(at);
  o runs;
  plan json;
  stop json;
  raise_needed boolean;
  new_ceiling bigint;
  new_allowed bigint;
BEGIN
  PERFORM spendcap_reconcile_due(now);
  SELECT * INTO o FROM runs WHERE id = run_id;
  IF NOT FOUND THEN RETURN json_build_object('error', 'missing'); END IF;
  IF NOT spendcap_caller_is_owner() THEN
    IF o.db_role <> session_user THEN
      RAISE EXCEPTION 'run % was admitted by %, not by %', run_id, o.db_role, session_user
        USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF o.status = 'running' AND spend < o.reported_spend_micros THEN
      RAISE EXCEPTION 'run %: reports spend % below the % it reported before', run_id, spend,
        o.reported_spend_micros USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF o.status = 'running' AND spend::numeric > o.rate_micros_per_hour::numeric
         * (greatest(now - o.started_at, 0) + 2)::numeric / 3600 + 1 THEN
      RAISE EXCEPTION 'run %: reports spend % above what % an hour can spend since it was admitted',
        run_id, spend, o.rate_micros_per_hour USING ERRCODE = 'insufficient_privilege';
    END IF;
  END IF;
  IF want < 0 OR spend < 0 THEN
    RAISE EXCEPTION 'run %: negative amount of money', run_id
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  raise_needed := o.status <> 'running' OR want > o.allowed_micros OR want > o.ceiling_micros;
  -- The plan's near-term need counts the spend reported now (o is not written back whole).
  o.spend_micros := spend;
  plan := spendcap_plan_grant(o, want, caps, NOT raise_needed);
  stop := spendcap_first_stop_order(o);
  IF o.status <> 'running' THEN
    RETURN json_build_object('now', now, 'running', false, 'plan', plan, 'stop', stop,
      'live_delta', 0, 'held_delta', 0, 'ceiling', o.ceiling_micros,
      'allowed', o.allowed_micros);
  END IF;
  new_ceiling := (plan->>'ceiling')::bigint;
  new_allowed := (plan->>'allowed')::bigint;
  UPDATE runs SET spend_micros = spend, reported_spend_micros = spend,
    ceiling_micros = new_ceiling, allowed_micros = new_allowed, heartbeat_at = now,
    usage_live_micros = CASE WHEN raise_needed THEN spend ELSE usage_live_micros END,
    reconcile_at = spendcap_reconcile_at(now, new_ceiling, spend, o.rate_micros_per_hour,
                                         o.shutdown_ms, o.sync_ms),
    progress_step = CASE WHEN progress IS NULL THEN o.progress_step
                         ELSE (progress->>'step')::bigint END,
    progress_total_steps = CASE WHEN progress IS NULL THEN o.progress_total_steps
                                ELSE (progress->>'total_steps')::bigint END,
    progress_line = CASE WHEN progress IS NULL THEN o.progress_line ELSE progress->>'line' END,
    metric_name = COALESCE(progress->>'metric_name', o.metric_name),
    metric_value = CASE WHEN progress->>'metric_name' IS NULL THEN o.metric_value
                        ELSE (progress->>'metric_value')::double precision END,
    progress_eta_at = CASE WHEN progress IS NULL THEN o.progress_eta_at
                           ELSE spendcap_progress_eta(now,
                                  (progress->>'seconds_left')::double precision) END
  WHERE id = run_id;
  IF progress->>'tracker' IS NOT NULL THEN
    PERFORM spendcap_set_tracker(run_id, progress->>'tracker');
  END IF;
  -- live_delta: the run's own spend since the live sums last counted it.
  RETURN json_build_object('now', now, 'running', true, 'plan', plan, 'stop', stop,
    'live_delta', spend - o.usage_live_micros, 'held_delta', new_ceiling - o.ceiling_micros,
    'ceiling', new_ceiling, 'allowed', new_allowed);
END $$;

-- The final row (BudgetLedger::finish_run) in one call. `r` carries the final's fields (status,
-- reason, exit code, spend, elapsed seconds, GPU record, progress report, storage, in its tags
-- the progress channel's tracker id, and from v27 progress_seconds_left, not a column: the run's
-- progress_eta_at from the server's clock, the stored one kept without it); the rest is the
-- stored row's. Written through spendcap_update_run, so its checks hold for a runner. Returns
-- NULL when the run is not in the ledger, false when it was final already (and not a reconciled
-- lost run, whose real spend replaces its charge).
CREATE OR REPLACE FUNCTION spendcap_finish(r json, at double precision) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  n runs := json_populate_record(NULL::runs, r);
  now double precision := spendcap_clock(at);
  m runs;
  s record;
BEGIN
  PERFORM spendcap_reconcile_due(now);
  SELECT * INTO m FROM runs WHERE id = n.id;
  IF NOT FOUND THEN RETURN NULL; END IF;
  IF m.status <> 'running' AND m.reconciled = 0 THEN RETURN false; END IF;
  FOR s IN SELECT * FROM spendcap_named_scopes(m) LOOP
    PERFORM spendcap_lock_scope(s.kind, s.name);
  END LOOP;
  m.status := n.status; m.reason := n.reason; m.exit_code := n.exit_code;
  m.spendcap_exit_code := n.spendcap_exit_code;
  m.spend_micros := n.spend_micros; m.elapsed_seconds := n.elapsed_seconds;
  IF n.gpu_measured IS NOT NULL THEN
    m.gpu_measured := n.gpu_measured; m.gpu_not_measured := n.gpu_not_measured;
    m.gpu_devices := n.gpu_devices; m.gpu_allocated_seconds := n.gpu_allocated_seconds;
    m.gpu_busy_seconds := n.gpu_busy_seconds; m.gpu_idle_spend_micros := n.gpu_idle_spend_micros;
    m.gpu_energy_kwh := n.gpu_energy_kwh; m.gpu_co2_kg := n.gpu_co2_kg;
    m.gpu_energy_cost_micros := n.gpu_energy_cost_micros; m.gpu_sources := n.gpu_sources;
    m.gpu_timeline := n.gpu_timeline;
  ELSE
    m.gpu_measured := NULL;  -- update_run keeps the stored record
  END IF;
  m.metric_name := n.metric_name; m.metric_value := n.metric_value; m.units := n.units;
  m.egress_gb := n.egress_gb;
  m.storage_peak_gb := n.storage_peak_gb; m.storage_spend_micros := n.storage_spend_micros;
  m.progress_step := n.progress_step; m.progress_total_steps := n.progress_total_steps;
  m.progress_line := n.progress_line;
  m.progress_eta_at := COALESCE(spendcap_progress_eta(now,
                                  (r->>'progress_seconds_left')::double precision),
                                m.progress_eta_at);
  m.checkpoint_signal := n.checkpoint_signal; m.checkpoint_signalled := n.checkpoint_signalled;
  m.checkpoint_signal_seconds := n.checkpoint_signal_seconds;
  m.checkpoint_written_seconds := n.checkpoint_written_seconds;
  m.reconciled := 0;
  m.overrun := CASE WHEN n.spend_micros > m.ceiling_micros THEN 1 ELSE 0 END;
  m.finished_at := COALESCE(m.finished_at, now);
  -- Of the final's tags only `tracker` is read (v25), set while the row is not final yet; a
  -- refusal of spendcap_update_run below undoes it with the rest.
  IF (n.tags::json)->>'tracker' IS NOT NULL THEN
    PERFORM spendcap_set_tracker(n.id, (n.tags::json)->>'tracker');
  END IF;
  PERFORM spendcap_update_run(row_to_json(m));
  RETURN true;
END $$;

-- The schema's version in one round trip (opening a ledger that needs no migration).
CREATE OR REPLACE FUNCTION spendcap_schema_version() RETURNS integer
LANGUAGE plpgsql STABLE SET search_path FROM CURRENT AS $$
BEGIN
  RETURN (SELECT COALESCE(MAX(version), 0) FROM schema_version);
END $$;
)sql";
}

}  // namespace spendcap::postgres_schema

namespace spendcap::postgres_schema {

namespace {

Money micros_of(const nlohmann::json& value) {
  return value.is_null() ? Money{} : Money{value.get<std::int64_t>()};
}

std::optional<Scope> scope_of(const nlohmann::json& kind, const nlohmann::json& name) {
  if (kind.is_null() || name.is_null()) return std::nullopt;
  auto parsed = parse_scope_kind(kind.get<std::string>());
  if (!parsed) return std::nullopt;
  return Scope{*parsed, name.get<std::string>()};
}

GrantPlan plan_of(const nlohmann::json& p) {
  GrantPlan plan;
  for (const nlohmann::json& s : p.at("scopes")) {
    ScopeState state;
    state.rule.scope = *scope_of(s.at("kind"), s.at("name"));
    state.rule.amount = micros_of(s.at("amount"));
    state.rule.period = parse_period(s.at("period").get<std::string>()).value_or(Period::total);
    state.days = {s.at("first").get<std::int64_t>(), s.at("last").get<std::int64_t>()};
    state.sums = {micros_of(s.at("spent")), micros_of(s.at("held")), micros_of(s.at("live"))};
    state.headroom = micros_of(s.at("headroom"));
    if (s.contains("other_runs") && !s.at("other_runs").is_null()) {
      state.other_runs = s.at("other_runs").get<std::int64_t>();
    }
    plan.scopes.push_back(std::move(state));
  }
  if (!p.at("run_budget").is_null()) plan.run_budget.amount = micros_of(p.at("run_budget"));
  plan.run_budget.lowered_by = scope_of(p.at("lowered_by_kind"), p.at("lowered_by_name"));
  if (auto own = scope_of(p.at("own_kind"), p.at("own_name"))) {
    plan.own = ScopeHeadroom{*own, micros_of(p.at("own_headroom"))};
  }
  plan.job_others = micros_of(p.at("job_others"));
  plan.decision.ceiling = micros_of(p.at("ceiling"));
  plan.decision.allowed = micros_of(p.at("allowed"));
  plan.decision.binding = scope_of(p.at("binding_kind"), p.at("binding_name"));
  plan.decision.fair_share = p.value("fair_share", false);
  return plan;
}

}  // namespace

std::string caps_json(const std::vector<BudgetRule>& caps) {
  nlohmann::json list = nlohmann::json::array();
  for (const BudgetRule& cap : caps) {
    list.push_back({{"kind", to_string(cap.scope.kind)},
                    {"name", cap.scope.name},
                    {"amount", cap.amount.micros},
                    {"period", to_string(cap.period)},
                    {"max_run", cap.max_run ? nlohmann::json(cap.max_run->micros) : nullptr}});
  }
  return list.dump();
}

RefusalCount refusal_count_of_json(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text);
  return RefusalCount{j.at("this_minute").get<std::int64_t>(), j.at("recorded").get<bool>()};
}

ServerGrant server_grant_of_json(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text);
  ServerGrant grant;
  if (j.contains("error")) {
    grant.error = j.at("error").get<std::string>();
    return grant;
  }
  grant.plan = plan_of(j.at("plan"));
  grant.now = j.at("now").get<double>();
  grant.admitted = j.value("admitted", false);
  grant.fits = j.value("fits", false);
  grant.running = j.value("running", false);
  grant.unfinished = j.value("unfinished", std::int64_t{0});
  grant.job_spent_before = micros_of(j.value("job_spent_before", nlohmann::json()));
  if (j.contains("job_budget_before") && !j.at("job_budget_before").is_null()) {
    grant.job_budget_before = micros_of(j.at("job_budget_before"));
  }
  if (j.contains("job_owner") && !j.at("job_owner").is_null()) {
    const nlohmann::json& o = j.at("job_owner");
    RunRecord owner;
    owner.id = o.at("id").get<std::string>();
    owner.team = o.at("team").is_null() ? "" : o.at("team").get<std::string>();
    owner.user = o.at("user").is_null() ? "" : o.at("user").get<std::string>();
    grant.job_owner = owner;
  }
  if (j.contains("refusal") && !j.at("refusal").is_null()) {
    grant.refusal_count = refusal_count_of_json(j.at("refusal").dump());
  }
  if (j.contains("stop") && !j.at("stop").is_null()) {
    const nlohmann::json& s = j.at("stop");
    StopOrder order;
    order.id = s.at("id").get<std::int64_t>();
    order.scope = scope_of(s.at("kind"), s.at("name")).value_or(Scope{ScopeKind::run, ""});
    order.reason = s.at("reason").get<std::string>();
    order.placed_by = s.at("placed_by").get<std::string>();
    order.placed_at = s.at("placed_at").get<double>();
    grant.stop = order;
  }
  grant.live_delta = micros_of(j.value("live_delta", nlohmann::json()));
  grant.held_delta = micros_of(j.value("held_delta", nlohmann::json()));
  grant.ceiling = micros_of(j.value("ceiling", nlohmann::json()));
  grant.allowed = micros_of(j.value("allowed", nlohmann::json()));
  return grant;
}

}  // namespace spendcap::postgres_schema
