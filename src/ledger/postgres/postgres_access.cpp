// Who may stop and accept whose runs on a PostgreSQL ledger, enforced by the server (issue 19):
// ledger/stop_rule.hpp's rule with login roles for users. A run is its admitting role's
// (runs.db_role); `--user NAME` is the login role NAME's (a runner's role is named as its Unix
// user, as libpq's default user is); a budget's member group G is the PostgreSQL role G (`CREATE
// ROLE vision NOLOGIN; GRANT vision TO alice`). spendcap checks the same rule before it calls
// these, with Unix users and groups, for its messages; these hold against psql in a runner's
// hands. And whose scope locks a role may take (issue 38 item 7). Contract in postgres_schema.hpp.
#include "postgres_schema.hpp"

namespace spendcap::postgres_schema {

std::string access_routines() {
  return R"sql(
-- A scope's lock: the key hashes the ledger's secret salt (schema 21), which only the owner reads, so
-- it is taken only inside the owner's functions (this one is called by them, and users may not
-- call it) and no other role can compute the key to hold it (issue 38 item 7: a user's open
-- transaction holding another team's key made that team's runs refused). The same key as
-- spendcap_lock_scopes (the client's lock_scopes), so the two exclude each other. INTO STRICT:
-- a missing salt is an error, never a lock of NULL (pg_advisory_xact_lock is strict: no lock).
CREATE OR REPLACE FUNCTION spendcap_lock_scope(kind text, name text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  secret text;
BEGIN
  SELECT salt INTO STRICT secret FROM scope_lock_salt;
  PERFORM pg_advisory_xact_lock(hashtextextended(secret || ':' || kind || ':' || name, 0));
END $$;

-- The client's lock_scopes (postgres_runs.cpp): scopes as 'kind:name', in the order given. The
-- owner takes any; another role only the scopes of a run due its ceiling (the one client path
-- that locks on PostgreSQL is charging lost runs; the grants lock inside the functions above),
-- and skips the rest: the caller reads each run again under the locks and leaves one no longer
-- due. So a role cannot hold a scope's lock in an open transaction beyond what a lost run in it
-- allows, and that run is charged by whoever comes first.
CREATE OR REPLACE FUNCTION spendcap_lock_scopes(scopes text[], at double precision)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  secret text;
  scope text;
  owner boolean := spendcap_caller_is_owner();
  now double precision := spendcap_clock(at);
BEGIN
  SELECT salt INTO STRICT secret FROM scope_lock_salt;
  FOREACH scope IN ARRAY scopes LOOP
    IF owner OR EXISTS (SELECT 1 FROM runs r, LATERAL spendcap_named_scopes(r) n
        WHERE r.status = 'running' AND r.reconcile_at <= now
          AND n.kind || ':' || n.name = scope) THEN
      PERFORM pg_advisory_xact_lock(hashtextextended(secret || ':' || scope, 0));
    END IF;
  END LOOP;
END $$;

-- Whether the session's role is in one of the roles a budget's member list names (JSON text).
CREATE OR REPLACE FUNCTION spendcap_in_member_roles(groups text) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
  SELECT COALESCE(bool_or(pg_has_role(session_user, r.oid, 'MEMBER')), false)
  FROM json_array_elements_text(COALESCE(groups, '[]')::json) AS g(name)
  JOIN pg_roles r ON r.rolname = g.name
$$;

-- Why the session's role may not stop or accept run r ('' when it may): the owner, the role that
-- admitted it, or (for a run with a team) anyone in every member list of its team, experiment
-- and project budgets (a budget without one is open).
CREATE OR REPLACE FUNCTION spendcap_why_not_act_on_run(r runs) RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  b record;
BEGIN
  IF spendcap_caller_is_owner() OR r.db_role = session_user THEN RETURN ''; END IF;
  IF r.team = '' THEN
    RETURN format('run %s was admitted by %s and has no team', left(r.id, 8), r.db_role);
  END IF;
  FOR b IN SELECT scope_kind, scope_name, member_groups FROM budgets
      WHERE COALESCE(member_groups, '[]') <> '[]'
      AND ((scope_kind = 'team' AND scope_name = r.team)
        OR (scope_kind = 'experiment' AND scope_name = r.experiment)
        OR (scope_kind = 'project' AND scope_name = r.project))
      ORDER BY scope_kind DESC LOOP
    IF NOT spendcap_in_member_roles(b.member_groups) THEN
      RETURN format('run %s was admitted by %s, and %s is in none of the member roles %s of %s:%s',
                    left(r.id, 8), r.db_role, session_user, b.member_groups, b.scope_kind,
                    b.scope_name);
    END IF;
  END LOOP;
  RETURN '';
END $$;

-- Why the session's role may not place an order on a scope that refuses its later runs.
CREATE OR REPLACE FUNCTION spendcap_why_not_order_scope(kind text, name text) RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  groups text;
  r runs;
  why text;
BEGIN
  IF spendcap_caller_is_owner() THEN RETURN ''; END IF;
  IF kind = 'user' THEN
    IF name = session_user THEN RETURN ''; END IF;
    RETURN format('it would refuse every later run of %s: only the role %s (and the ledger''s '
                  'owner) may place it', name, name);
  ELSIF kind IN ('team', 'experiment', 'project') THEN
    SELECT member_groups INTO groups FROM budgets WHERE scope_kind = kind AND scope_name = name;
    IF COALESCE(groups, '[]') = '[]' THEN
      IF kind = 'team' THEN RETURN ''; END IF;  -- an open team: everyone is its member
      RETURN format('%s:%s names no members: only the ledger''s owner may place it', kind, name);
    END IF;
    IF spendcap_in_member_roles(groups) THEN RETURN ''; END IF;
    RETURN format('%s is in none of the member roles %s of %s:%s', session_user, groups, kind,
                  name);
  ELSIF kind = 'run' THEN
    SELECT * INTO r FROM runs WHERE id = name;
    IF NOT FOUND THEN RETURN format('no run %s', name); END IF;
    RETURN spendcap_why_not_act_on_run(r);
  ELSIF kind = 'job' THEN
    IF NOT EXISTS (SELECT 1 FROM runs WHERE job_key = name) THEN
      RETURN format('no run has the job key %s yet: only the ledger''s owner may place it', name);
    END IF;
    -- The key's own role, or a member role its team's budget names (stop_rule.hpp).
    SELECT * INTO r FROM runs WHERE job_key = name
      ORDER BY (status = 'refused'), started_at, id LIMIT 1;
    IF r.db_role <> session_user THEN
      SELECT member_groups INTO groups FROM budgets WHERE scope_kind = 'team'
        AND scope_name = r.team;
      IF COALESCE(groups, '[]') = '[]' OR NOT spendcap_in_member_roles(groups) THEN
        RETURN format('job key %s is %s''s of team %s: only that role, the member roles of '
                      'team:%s and the ledger''s owner may stop it', name, r.db_role, r.team,
                      r.team);
      END IF;
    END IF;
    FOR r IN SELECT * FROM runs WHERE job_key = name LOOP
      why := spendcap_why_not_act_on_run(r);
      IF why <> '' THEN RETURN why; END IF;
    END LOOP;
    RETURN '';
  END IF;
  RETURN format('no scope kind %s', kind);
END $$;

-- Whether the session's role speaks for a scope by name (clears orders others placed on it).
CREATE OR REPLACE FUNCTION spendcap_names_caller(kind text, name text) RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  groups text;
  r runs;
BEGIN
  IF spendcap_caller_is_owner() THEN RETURN true; END IF;
  IF kind = 'user' THEN RETURN name = session_user; END IF;
  IF kind IN ('team', 'experiment', 'project') THEN
    SELECT member_groups INTO groups FROM budgets WHERE scope_kind = kind AND scope_name = name;
    RETURN COALESCE(groups, '[]') <> '[]' AND spendcap_in_member_roles(groups);
  END IF;
  IF kind = 'run' THEN
    SELECT * INTO r FROM runs WHERE id = name;
    IF NOT FOUND THEN RETURN false; END IF;
    IF r.db_role = session_user THEN RETURN true; END IF;
    SELECT member_groups INTO groups FROM budgets WHERE scope_kind = 'team' AND scope_name = r.team;
    RETURN COALESCE(groups, '[]') <> '[]' AND spendcap_why_not_act_on_run(r) = '';
  END IF;
  IF kind = 'job' THEN
    SELECT * INTO r FROM runs WHERE job_key = name
      ORDER BY (status = 'refused'), started_at, id LIMIT 1;
    IF NOT FOUND THEN RETURN false; END IF;
    IF r.db_role = session_user THEN RETURN true; END IF;
    SELECT member_groups INTO groups FROM budgets WHERE scope_kind = 'team' AND scope_name = r.team;
    RETURN COALESCE(groups, '[]') <> '[]' AND spendcap_in_member_roles(groups);
  END IF;
  RETURN false;
END $$;

-- Places an order: only when the session's role may stop every running run it reaches and
-- speaks for the scope's later runs. The scope's lock (as admission takes it) keeps a run from
-- being admitted into the scope between the check and the order.
CREATE OR REPLACE FUNCTION spendcap_place_stop_order(kind text, name text, why text, by text,
                                                     at double precision) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  r runs;
  refusal text;
  placed bigint;
BEGIN
  IF NOT spendcap_caller_is_owner() THEN
    PERFORM spendcap_lock_scope(kind, name);
    FOR r IN SELECT * FROM runs WHERE status = 'running' AND CASE kind
        WHEN 'team' THEN team WHEN 'experiment' THEN experiment WHEN 'project' THEN project
        WHEN 'user' THEN user_name WHEN 'job' THEN job_key WHEN 'run' THEN id END = name LOOP
      refusal := spendcap_why_not_act_on_run(r);
      IF refusal <> '' THEN
        RAISE EXCEPTION 'the order on %:% would reach a run % may not stop: %', kind, name,
          session_user, refusal USING ERRCODE = 'insufficient_privilege';
      END IF;
    END LOOP;
    refusal := spendcap_why_not_order_scope(kind, name);
    IF refusal <> '' THEN
      RAISE EXCEPTION 'an order on %:% by %: %', kind, name, session_user, refusal
        USING ERRCODE = 'insufficient_privilege';
    END IF;
  END IF;
  INSERT INTO stop_orders (scope_kind, scope_name, reason, placed_by, placed_at, db_role)
  VALUES (kind, name, why, by, at, session_user) RETURNING id INTO placed;
  RETURN placed;
END $$;

-- Clears the active orders on a scope: the owner, the role that placed them, or one that speaks
-- for the scope by name.
CREATE OR REPLACE FUNCTION spendcap_clear_stop_orders(kind text, name text,
                                                      at double precision) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  cleared integer;
BEGIN
  IF EXISTS (SELECT 1 FROM stop_orders WHERE scope_kind = kind AND scope_name = name
      AND cleared_at IS NULL AND db_role <> session_user)
     AND NOT spendcap_names_caller(kind, name) THEN
    RAISE EXCEPTION 'a stop order on %:% was placed by another role, and % does not speak for it',
      kind, name, session_user USING ERRCODE = 'insufficient_privilege';
  END IF;
  UPDATE stop_orders SET cleared_at = at
  WHERE scope_kind = kind AND scope_name = name AND cleared_at IS NULL;
  GET DIAGNOSTICS cleared = ROW_COUNT;
  RETURN cleared;
END $$;

-- Marks a finished run's result as the one kept, or replaces the note: the run's role, the owner,
-- or a member its team's budget names.
CREATE OR REPLACE FUNCTION spendcap_accept_result(accepted_run text, accepted_note text,
                                                  accepted_by_whom text,
                                                  accepted_when double precision) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  o runs;
  refusal text;
BEGIN
  SELECT * INTO o FROM runs WHERE id = accepted_run;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'no run %', accepted_run USING ERRCODE = 'no_data_found';
  END IF;
  IF o.status IN ('running', 'refused') THEN
    RAISE EXCEPTION 'run % is % and has no result', accepted_run, o.status
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  refusal := spendcap_why_not_act_on_run(o);
  -- Accepting takes a member the team's budget names: an open team's runs are their role's.
  IF refusal = '' AND NOT spendcap_caller_is_owner() AND o.db_role <> session_user
     AND NOT EXISTS (SELECT 1 FROM budgets WHERE scope_kind = 'team' AND scope_name = o.team
                     AND COALESCE(member_groups, '[]') <> '[]') THEN
    refusal := format('run %s was admitted by %s, and team:%s names no members', left(o.id, 8),
                      o.db_role, o.team);
  END IF;
  IF refusal <> '' THEN
    RAISE EXCEPTION 'accepting: %', refusal USING ERRCODE = 'insufficient_privilege';
  END IF;
  INSERT INTO accepted_results AS a (run_id, note, accepted_by, accepted_at, db_role)
  VALUES (accepted_run, accepted_note, accepted_by_whom, accepted_when, session_user)
  ON CONFLICT (run_id) DO UPDATE SET note = excluded.note, accepted_by = excluded.accepted_by,
    accepted_at = excluded.accepted_at, db_role = excluded.db_role;
END $$;

-- The webhooks of a run its role just admitted (by name: outbox destinations, never secrets).
CREATE OR REPLACE FUNCTION spendcap_put_run_webhooks(run text, hooks text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM runs WHERE id = run AND status = 'running'
      AND (db_role = session_user OR spendcap_caller_is_owner())) THEN
    RAISE EXCEPTION 'run % is not a running run of %', run, session_user
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  INSERT INTO run_webhooks (run_id, webhooks, db_role) VALUES (run, hooks::json::text,
    session_user);
END $$;

-- Queues a reconciled lost run's `lost` event once (whoever reconciled it): marks it told and
-- stores one outbox entry per webhook the run recorded, as the run's role's own (so that its
-- flush, which sees only its own, sends it). Only the run's own destinations, only its lost
-- event (a body that names a run must name this one); a second caller finds it told and stores
-- nothing.
CREATE OR REPLACE FUNCTION spendcap_tell_lost_run(run text, at double precision, entries json)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  o runs;
  w run_webhooks;
  e json;
BEGIN
  SELECT * INTO o FROM runs WHERE id = run;
  IF NOT FOUND OR o.reconciled <> 1 THEN RETURN false; END IF;
  UPDATE run_webhooks SET lost_told_at = at WHERE run_id = run AND lost_told_at IS NULL
  RETURNING * INTO w;
  IF NOT FOUND THEN RETURN false; END IF;
  FOR e IN SELECT * FROM json_array_elements(entries) LOOP
    IF e->>'event' IS DISTINCT FROM 'lost' OR e->>'run_id' IS DISTINCT FROM run
       OR ((e->>'body')::json)->>'run_id' <> run
       OR NOT EXISTS (SELECT 1 FROM json_array_elements(w.webhooks::json) h
         WHERE h->>'destination' = e->>'destination' AND h->>'format' = e->>'format'
         AND h->>'secret_env' = e->>'secret_env') THEN
      RAISE EXCEPTION 'run %: only its own lost event, to its own webhooks, may be queued', run
        USING ERRCODE = 'insufficient_privilege';
    END IF;
    INSERT INTO outbox (event_id, event, run_id, user_name, destination, format, secret_env,
      body, created_at, attempts, last_error, db_role)
    VALUES (e->>'event_id', 'lost', run, o.user_name, e->>'destination', e->>'format',
      e->>'secret_env', e->>'body', at, 0, '', o.db_role);
  END LOOP;
  RETURN true;
END $$;
)sql";
}

std::string access_grants() {
  return R"sql(
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'spendcap_runner') THEN
    GRANT SELECT ON run_webhooks TO spendcap_runner;
    GRANT EXECUTE ON FUNCTION spendcap_put_run_webhooks(text, text),
      spendcap_tell_lost_run(text, double precision, json) TO spendcap_runner;
  END IF;
END $$;
REVOKE ALL ON FUNCTION spendcap_in_member_roles(text), spendcap_why_not_act_on_run(runs),
  spendcap_why_not_order_scope(text, text), spendcap_names_caller(text, text),
  spendcap_put_run_webhooks(text, text), spendcap_tell_lost_run(text, double precision, json)
  FROM PUBLIC;
)sql";
}

}  // namespace spendcap::postgres_schema
