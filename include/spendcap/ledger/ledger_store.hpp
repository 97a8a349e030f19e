// LedgerStore: where a ledger keeps its rows, and nothing else. BudgetLedger (budget_ledger.hpp)
// holds every rule (admission, grants, heartbeats, finals, reconciliation, refusals, stop orders)
// once, over this seam; a backend (SqliteStore now, PostgreSQL next) only stores and locks.
//
// A store gives typed row operations inside its own transactions. transact() runs `body` in one
// transaction and commits when it returns; when `body` throws, the transaction is rolled back and
// the exception passes through. A store may run `body` again after a serialization failure, a
// deadlock or a busy file (until its own lock timeout), so a body assigns its results rather
// than accumulating them. A write transaction is serialised with every other write on the same
// ledger for what it reads and writes after lock_scopes(): that is the "take the scopes' budget
// rows first, in one fixed order" of the ceiling rule (SQLite: its single write lock, taken at
// BEGIN IMMEDIATE; PostgreSQL: SELECT ... FOR UPDATE on the budget rows).
//
// One store (one connection) is used by one thread at a time. Errors are spendcap::Error naming
// the ledger.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "spendcap/base/duration.hpp"
#include "spendcap/base/error.hpp"
#include "spendcap/base/money.hpp"
#include "spendcap/ledger/grant_rule.hpp"
#include "spendcap/ledger/ledger.hpp"
#include "spendcap/ledger/rollup.hpp"

namespace spendcap {

// A run as the store keeps it. BudgetLedger fills every field; a store writes and returns them
// unchanged. Durations are whole milliseconds (BudgetLedger rounds up), so that a store may keep
// integers and still return exactly what it was given.
// Who is delivering an outbox entry (Ledger::claim_outbox).
struct OutboxClaim {
  std::string claimed_by;    // a run id; "" for `outbox flush` or no one
  double claimed_until = 0;  // unix seconds, the ledger's clock
};

struct RunRecord : RunIdentity {
  std::string fingerprint;
  int pid = 0;
  std::optional<std::int64_t> uid;  // who admitted it (none: admitted before uids were kept)
  Mode mode = Mode::enforce;
  RunStatus status = RunStatus::running;  // `running` = unfinished: it holds its ceiling
  std::string reason;
  std::optional<int> exit_code;           // the command's own (128+N for a signal N)
  std::optional<int> spendcap_exit_code;  // spendcap's (124 for a budget trip); none before v21
  Money rate_per_hour, reserve;
  std::optional<Pricing> pricing;   // RunStart's; none: unknown (stored NULL, runs before v11)
  std::optional<Money> commitment;  // RunStart's; none: no commitment (or a run before v16)
  std::optional<Money> budget;      // --budget as given
  Nanos shutdown{}, sync{};
  double started_at = 0;  // unix seconds, the ledger's clock
  std::int64_t day = 0;   // utc_day(started_at): the usage rows it adds to
  double heartbeat_at = 0;
  double reconcile_at = 0;  // when it is charged its ceiling if no heartbeat comes
  std::optional<double> finished_at;
  Money spend, ceiling;
  Money allowed;            // what enforce mode would hold (warn mode: below ceiling)
  bool reconciled = false;  // lost and charged its ceiling, no final row yet
  bool overrun = false;     // finished with spend above its ceiling
  Money reported_spend;     // the spend of its last heartbeat, kept when reconciled
  std::optional<double> would_stop_at;
  std::string would_stop_reason;
  std::optional<double> elapsed_seconds;
  std::optional<RunGpu> gpu;  // written with the final row (update_run); none: no GPU record
  // The progress channel's last report (RunFinal's); stored by update_run.
  std::optional<std::string> metric_name;
  std::optional<double> metric_value, units, egress_gb;
  // RunFinal's checkpoint storage; stored by update_run.
  std::optional<double> storage_peak_gb;
  std::optional<Money> storage_spend;
  // Schema v19. Written at admission: the working directory ("" none), the budget in effect and
  // where it came from (budget_source_text; "" for runs before v19). Written by update_run when
  // the run carries them: RunFinal's last progress line and checkpoint.
  std::string cwd;
  std::optional<Money> run_budget;
  std::string budget_source;
  std::optional<RunLastProgress> last_progress;
  std::optional<RunCheckpoint> checkpoint;
  // Schema v27: when the run is expected to have done its steps (RunView's), written by
  // update_run with last_progress. The final row's seconds left (RunFinal's) go to a store whose
  // server runs the final row (finish_in_server), which adds its own clock; not a column.
  std::optional<double> progress_eta_at;
  std::optional<double> progress_seconds_left;
};

// A run's durations as both stores keep them, in whole milliseconds (RunRecord's are whole already:
// rounding up only guards a caller that forgot).
inline std::int64_t to_ms_rounded_up(Nanos duration) {
  return (duration.count() + 999'999) / 1'000'000;
}

// Per scope and UTC start day: spent = finished runs' spend, held = unfinished runs' ceilings,
// live = unfinished runs' last reported spend. Also a delta to add to those rows.
struct Usage {
  Money spent, held, live;
};

// ---- the grant rule in the server ----
// A budgeted scope of a run in the run's period, as a grant is planned (budget_ledger.cpp).
struct ScopeState {
  BudgetRule rule;
  DayRange days;
  Usage sums;
  Money headroom;
  std::optional<std::int64_t> other_runs;  // ScopeHeadroom's: counted when a raise is planned
};
// The grant for a run asking for `want`, and the state of its budgeted scopes.
struct GrantPlan {
  RunBudget run_budget;
  std::vector<ScopeState> scopes;
  std::optional<ScopeHeadroom> own;  // the run or job scope, when the run has a budget
  Money job_others;                  // with a job key: other runs' spend and ceilings
  GrantDecision decision;
};
// What a store whose server runs the grant rule itself (PostgreSQL: one call, one round trip)
// returns for an admission or a heartbeat: the same plan BudgetLedger would have made, and what
// its messages read.
struct ServerGrant {
  std::string error;  // "exists" (admission), "missing" (heartbeat), "no budget"; "" when done
  GrantPlan plan;
  double now = 0;               // the ledger's clock at the call
  bool admitted = false;        // admission: recorded running (else recorded refused)
  bool fits = false;            // admission: what it may hold covers its reserve
  bool running = false;         // heartbeat: the run was unfinished
  std::int64_t unfinished = 0;  // admission: unfinished runs of the binding scope in its period
  Money job_spent_before;
  std::optional<Money> job_budget_before;
  std::optional<StopOrder> stop;
  std::optional<RunRecord> job_owner;  // admission: the job key is this run's (id, team, user)
  RefusalCount refusal_count;          // admission, refused: recorded or only counted
  Money live_delta, held_delta;        // heartbeat: what it added to its scopes' sums
  Money ceiling, allowed;              // heartbeat: what the run holds now
};

enum class Access { read, write };

// The row operations of one transaction.
// One row of refused_counts (schema v23): a user's refused runs in one minute of the ledger's
// clock (floor(unix seconds / 60)), how many of them were stored as runs rows, and when the last
// came. db_role: the login role that counted them (PostgreSQL's key); "" on SQLite.
struct RefusedCountRow {
  std::string db_role, user;
  std::int64_t minute = 0, refused = 0, recorded = 0;
  double last_at = 0;
};

class StoreTxn {
 public:
  virtual ~StoreTxn() = default;

  // The ledger's clock, unix seconds: it decides periods and staleness, never a wrapper's clock.
  virtual double now() = 0;
  // Write transactions: takes the budget rows of `scopes` (sorted, in that order) before the
  // usage of those scopes is read. A store with one lock for the whole ledger does nothing.
  virtual void lock_scopes(const std::vector<Scope>& scopes) = 0;

  // ---- runs ----
  virtual std::optional<RunRecord> find_run(const std::string& id) = 0;
  virtual void insert_run(const RunRecord& run) = 0;  // a new id
  // Writes what may change after admission: status, reason, exit code, heartbeat_at,
  // reconcile_at, finished_at, spend, ceiling, allowed, reconciled, overrun, reported spend,
  // would-stop, elapsed seconds.
  virtual void update_run(const RunRecord& run) = 0;
  // Sets the run's tag `tracker` to `tracker` (the progress channel's id, HeartbeatProgress), the
  // other tags as they are. Its own unfinished run only, or its own reconciled lost one (for the
  // final row); PostgreSQL checks that in spendcap_set_tracker (schema v25).
  virtual void set_run_tracker(const std::string& id, const std::string& tracker) = 0;
  // Unfinished runs, oldest first (started_at, then id).
  virtual std::vector<RunRecord> unfinished_runs() = 0;
  // Runs recorded as overruns that started on or after `since_day`, oldest first.
  virtual std::vector<RunRecord> overrun_runs(std::int64_t since_day) = 0;
  // Unfinished runs whose reconcile_at <= `now` (a few, found by an index: every write asks).
  virtual std::vector<RunRecord> runs_due(double now) = 0;
  virtual bool any_run_due(double now) = 0;
  // Every run (finished or not) with this job key.
  virtual std::vector<RunRecord> runs_of_job(const std::string& job_key) = 0;
  // The runs of a command fingerprint started at or after `since` (unix seconds), oldest first,
  // that can change the crash-loop guard's verdict: every run not succeeded, each user's latest
  // success (by finished_at, else started_at) and every run with the crash_loop_cleared tag. An
  // earlier success of the same user is left out: the count restarts at the latest, so it could
  // not move it, and a command run every few seconds no longer reads its whole window.
  virtual std::vector<RunRecord> runs_of_fingerprint(const std::string& fingerprint,
                                                     double since) = 0;
  // Unfinished runs of `scope` (team, experiment, project or user) that started in `days`.
  virtual std::int64_t count_unfinished(const Scope& scope, DayRange days) = 0;
  // The sum of spend above ceiling of the overrun runs of `scope` that started in `days`.
  virtual Money overrun(const Scope& scope, DayRange days) = 0;

  // ---- budgets ----
  virtual std::optional<BudgetRule> budget_rule(const Scope& scope) = 0;
  virtual std::vector<BudgetRule> budget_rules() = 0;        // in any order
  virtual void put_budget_rule(const BudgetRule& rule) = 0;  // adds, or replaces the scope's
  virtual void remove_budget_rule(const Scope& scope) = 0;

  // ---- usage rows ----
  // The sums of the rows of `scope` for the days in `days`.
  virtual Usage usage(const Scope& scope, DayRange days) = 0;
  // Adds `delta` to the row of each of `scopes` for `day` (creating missing rows).
  virtual void add_usage(const std::vector<Scope>& scopes, std::int64_t day,
                         const Usage& delta) = 0;

  // ---- stop orders ----
  // The oldest active (not cleared) order on any of `scopes`.
  virtual std::optional<StopOrder> first_stop_order(const std::vector<Scope>& scopes) = 0;
  // Records a new active order and returns it with its id (> 0, increasing).
  virtual StopOrder insert_stop_order(const Scope& scope, const std::string& reason,
                                      const std::string& placed_by, double placed_at) = 0;
  // Clears the active orders on `scope`; returns how many.
  virtual int clear_stop_orders(const Scope& scope, double cleared_at) = 0;
  virtual std::vector<StopOrder> active_stop_orders() = 0;  // by id

  // ---- budget warnings announced (Ledger::claim_warning) ----
  // Inserts the row (scope, period_day, percent) unless there is one; true when it inserted. The
  // default keeps nothing and says true.
  virtual bool insert_warning(const Scope& scope, std::int64_t period_day, int percent,
                              const std::string& run_id, double at) {
    (void)scope, (void)period_day, (void)percent, (void)run_id, (void)at;
    return true;
  }

  // ---- refused runs, rate-limited per user (ledger.hpp's kRecordedRefusalsPerMinute) ----
  // Counts a refused run of `user` in the minute of `now`; recorded: the caller stores its row.
  // The default keeps no count and records every one.
  virtual RefusalCount count_refusal(const std::string& user, double now) {
    (void)user, (void)now;
    return {};
  }

  // ---- copying refused-run counts (ledger_copy.hpp) ----
  // Every count, by user and minute; on PostgreSQL one per login role too. The default keeps none.
  virtual std::vector<RefusedCountRow> refused_counts() { return {}; }
  // Merges `row` into the count of its user and minute (PostgreSQL: the caller's login role, as a
  // copied run's): each of refused, recorded and last_at becomes the larger of the two, so merging
  // the same row again changes nothing. A store that keeps no counts throws.
  virtual void merge_refused_count(const RefusedCountRow& row) {
    (void)row;
    throw Error("ledger", "this kind of ledger keeps no refused-run counts",
                "copy into a SQLite or PostgreSQL ledger");
  }

  // ---- the webhook outbox ----
  // Records `entry` (its id is ignored) and returns the new id (> 0, increasing).
  virtual std::int64_t insert_outbox(const OutboxEntry& entry) = 0;
  // The entries of `user` ("" for every user), by id.
  virtual std::vector<OutboxEntry> outbox_entries(const std::string& user) = 0;
  virtual void delete_outbox(std::int64_t id) = 0;
  // attempts + 1 and last_error = `error`; the claim is cleared (claimed_by '', claimed_until 0).
  virtual void update_outbox_failure(std::int64_t id, const std::string& error) = 0;
  // The entry's claim: who took it (a run id, "" for none or a flush) and until when (unix
  // seconds, the ledger's clock; 0: never claimed), its row locked until the transaction ends;
  // nullopt when the entry is gone.
  virtual std::optional<OutboxClaim> outbox_claim(std::int64_t id) = 0;
  virtual void set_outbox_claim(std::int64_t id, const OutboxClaim& claim) = 0;
  // ---- copying a ledger (ledger_copy.hpp) ----
  // Every run, finished or not, by started_at then id. A store that cannot list them throws.
  virtual std::vector<RunRecord> all_runs() {
    throw Error("ledger", "this kind of ledger cannot list every run", "copy from another ledger");
  }
  // ---- `spendcap runs` (ledger.hpp's RunQuery) ----
  // Newest first, at most query.limit. A store that cannot list them throws.
  virtual std::vector<RunRecord> list_runs(const RunQuery& query);
  // Ids starting with `prefix`, in id order, at most `limit`.
  virtual std::vector<std::string> run_ids_with_prefix(const std::string& prefix, int limit);
  // The ids just below and just above `id` in id order ("" where none): the shortest unique
  // prefix of `id` is one character longer than its longest common prefix with either.
  virtual std::pair<std::string, std::string> neighbour_run_ids(const std::string& id);
  // ---- reports ----
  // Calls `each` for every run with started_at in [since, until), in any order. Only what a report
  // reads need be filled: id, team, experiment, project, user, host, tags, status, reason,
  // exit_code, rate_per_hour, pricing, started_at, day, heartbeat_at, finished_at, spend,
  // ceiling, reconciled, overrun, elapsed_seconds, checkpoint (its waste, waste.hpp). A store that
  // has no reports yet throws Error.
  virtual void for_each_run_started(double since, double until,
                                    const std::function<void(const RunRecord&)>& each);

  // ---- rollups (rollup.hpp) ----
  // Whether the store keeps rollups; without them a report reads every run.
  virtual bool has_rollups() { return false; }
  // The cells of `span` that hold runs, in any order; with `team` or `experiment`, only theirs (the
  // span's cut keeps that tag). Metric ranges likewise. The defaults throw.
  virtual void for_each_rollup_cell(const RollupSpan& span, const std::optional<std::string>& team,
                                    const std::optional<std::string>& experiment,
                                    const std::function<void(const RollupCell&)>& each);
  virtual void for_each_rollup_metric(const RollupSpan& span,
                                      const std::optional<std::string>& team,
                                      const std::optional<std::string>& experiment,
                                      const std::function<void(const RollupMetric&)>& each);

  // ---- accepted results ----
  // Adds the run's accepted result, or replaces its note, by, and time.
  virtual void put_accepted_result(const AcceptedResult& accepted);
  virtual std::vector<AcceptedResult> accepted_results();  // by run id

  // ---- lost runs' events (issue 19; the defaults refuse, as reports' do) ----
  // Records the webhooks of a run just admitted (not called when it has none).
  virtual void put_run_webhooks(const std::string& run_id, const std::vector<RunWebhook>& hooks);
  // Reconciled runs (no final row yet) with recorded webhooks and no `lost` event told.
  virtual std::vector<std::pair<RunRecord, std::vector<RunWebhook>>> untold_lost_runs();
  // Marks the run's event told at `at` and inserts `entries` (created_at set) into the outbox,
  // the entries stored as the run's own (its user's; on PostgreSQL its login role's); only when
  // the run is reconciled and not told yet, else changes nothing and returns false.
  virtual bool claim_lost_run(const std::string& run_id, double at,
                              const std::vector<OutboxEntry>& entries);
  // Reconciled runs that started on or after `since_day`, oldest first.
  virtual std::vector<RunRecord> reconciled_runs(std::int64_t since_day);
};

class LedgerStore {
 public:
  virtual ~LedgerStore() = default;

  // Where it is ("sqlite:/var/lib/spendcap/ledger.db"), for messages; never holds a password.
  virtual std::string url() const = 0;
  virtual void transact(Access access, const std::function<void(StoreTxn&)>& body) = 0;

  // Whom the ledger trusts (Ledger::caller_is_owner, Ledger::is_personal), and the owner's name
  // for the message that refuses someone else.
  virtual bool caller_is_owner() = 0;
  virtual bool is_personal() = 0;
  virtual std::string owner_name() = 0;

  // The grant rule in the server, when the store has one (else nullopt, and BudgetLedger runs the
  // rule over transact()). Each is one transaction that reconciles lost runs first, as
  // BudgetLedger's do; `caps` are LedgerOptions::budget_caps. admit_in_server records `run` (a
  // new record: status, clock and grant are the server's) running or refused;
  // heartbeat_in_server reports `spend` and raises the ceiling toward `want` (and records
  // `progress`, when given, as the run's last progress line and metric).
  virtual std::optional<ServerGrant> admit_in_server(const RunRecord& run, Money want,
                                                     const std::vector<BudgetRule>& caps) {
    (void)run, (void)want, (void)caps;
    return std::nullopt;
  }
  virtual std::optional<ServerGrant> heartbeat_in_server(
      const std::string& run_id, Money spend, Money want, const std::vector<BudgetRule>& caps,
      const std::optional<HeartbeatProgress>& progress) {
    (void)run_id, (void)spend, (void)want, (void)caps, (void)progress;
    return std::nullopt;
  }
  // finish_run's final row in one call: `final` carries the final's fields (status, reason, exit
  // code, spend, elapsed seconds, GPU record, progress report, storage). Returns "written",
  // "final already" or "missing"; nullopt: no server rule.
  virtual std::optional<std::string> finish_in_server(const RunRecord& final) {
    (void) final;
    return std::nullopt;
  }

  // Brings the rollups up to date before a report reads them, where the store defers that work
  // (SQLite folds its journal: sqlite_store.hpp). Best effort and never needed for a correct
  // report: a store that cannot write now leaves its pending rows to the read, which counts them.
  virtual void settle_rollups() {}
};

}  // namespace spendcap
