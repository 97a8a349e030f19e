// The ledger: every run, the budgets, the stop orders. Budget amounts live here, so every wrapper
// that shares a ledger enforces the same numbers. One rule holds, for every scope and period:
//
//     spend of finished runs + ceilings of unfinished (running and lost) runs <= budget
//
// A running run never spends past its ceiling (the supervisor trips before it would). Ceilings rise
// only in one serialised transaction over all of the run's scopes (SQLite: BEGIN IMMEDIATE; the
// scopes' budget rows are the lock), and only finalisation releases them. A run belongs to the
// period in which it started (the ledger's clock). A run whose heartbeat is stale is lost: it keeps
// its ceiling, and once it could no longer be spending (last heartbeat + (ceiling - spend) / rate +
// its shutdown time) it is reconciled and charged exactly its ceiling, until its real final row
// (spooled on its host) replaces that charge.
//
// A Ledger is used by one thread at a time (AsyncLedger gives the supervisor a worker thread).
// Errors (unreachable, locked too long, corrupt) are thrown as spendcap::Error.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "spendcap/base/money.hpp"
#include "spendcap/ledger/run_gpu.hpp"
#include "spendcap/ledger/run_identity.hpp"
#include "spendcap/policy/policy.hpp"

namespace spendcap {

struct Scope {
  ScopeKind kind = ScopeKind::run;
  std::string name;
  auto operator<=>(const Scope&) const = default;
};
std::string to_string(const Scope& scope);  // "team:vision"

// The policy-budgeted scopes of anything with team, experiment, project and user fields (a run's
// record, its settings): those that are named, in that fixed order.
template <typename Named>
std::vector<Scope> named_scopes(const Named& named) {
  std::vector<Scope> scopes;
  for (auto [kind, name] :
       {std::pair{ScopeKind::team, &named.team},
        std::pair{ScopeKind::experiment, &named.experiment},
        std::pair{ScopeKind::project, &named.project}, std::pair{ScopeKind::user, &named.user}}) {
    if (!name->empty()) scopes.push_back({kind, *name});
  }
  return scopes;
}

// A budget as the ledger holds it (applied from the owner's policy).
struct BudgetRule {
  Scope scope;  // team, experiment, project or user
  Money amount;
  Period period = Period::month;
  std::optional<Money> max_run;
  // Its members' Unix groups (the policy's "members"): only they, and the ledger's owner, may
  // charge runs to it or stop its runs (run/membership.hpp). Empty: anyone.
  std::vector<std::string> member_groups = {};
};

// The budgets a policy defines, as ledger rules.
std::vector<BudgetRule> budget_rules_of(const Policy& policy);

// A webhook of a run, named as the outbox names it (OutboxEntry: "env:NAME", never a secret),
// recorded at its start so that whoever reconciles the run once it is lost can queue its `lost`
// event for it (issue 19, item 5).
struct RunWebhook {
  std::string destination, format, secret_env;
  auto operator<=>(const RunWebhook&) const = default;
};

// What the kill path did about the job's checkpoint, kept with the final row of a run spendcap
// stopped (a trip, a signal, a stop order; schema v19). None: the job ended by itself.
struct RunCheckpoint {
  std::string signal;         // "SIGUSR1"; "none" when the run had no checkpoint signal
  int signalled = 0;          // processes it was sent to (0: none catches it, the grace skipped)
  double signal_seconds = 0;  // when it was sent, seconds after launch
  // When the job's $SPENDCAP_CHECKPOINT_DONE appeared, seconds after launch; none: not in the
  // grace.
  std::optional<double> written_seconds;
  auto operator<=>(const RunCheckpoint&) const = default;
};

// The progress channel's last good line, kept with the final row (schema v19).
struct RunLastProgress {
  std::optional<std::int64_t> step, total_steps;
  std::string line;  // as the job wrote it, control characters dropped, at most kLastProgressChars
  auto operator<=>(const RunLastProgress&) const = default;
};
inline constexpr std::size_t kLastProgressChars = 200;

// What a heartbeat carries of the progress channel so far (schema v19): its last good line and
// metric, so that `show` of a running run has them. The final row's replace them.
struct HeartbeatProgress {
  RunLastProgress last;
  std::optional<std::string> metric_name;
  std::optional<double> metric_value;
  // The experiment tracker's run id the progress channel reported ("wandb:1a2b3c4d", at most
  // kMaxTrackerTagBytes), to be the run's tag `tracker` (schema v25); none: the tags stay as they
  // are (no id reported, or the run had a `tracker` tag at admission, which is kept).
  std::optional<std::string> tracker;
  // The time the run still needs for its steps at its recent pace, as of this heartbeat
  // (guards/progress.hpp's seconds_left); the ledger keeps when that is, on its own clock, as the
  // run's progress_eta_at (schema v27). None: not known (no total, no pace yet).
  std::optional<double> seconds_left;
  auto operator<=>(const HeartbeatProgress&) const = default;
};
// The longest tracker id a store takes as the tag (guards/progress.hpp's kMaxTrackerBytes, a
// tag's value limit at admission; PostgreSQL's spendcap_set_tracker checks it too).
inline constexpr std::size_t kMaxTrackerTagBytes = 256;
// The most seconds left a store takes (guards/progress.hpp's kMaxSecondsLeft, 30 days; PostgreSQL's
// spendcap_heartbeat and spendcap_finish bound it too).
inline constexpr double kMaxProgressSecondsLeft = 30.0 * 24 * 3600;
// When a run `seconds_left` from its last step is expected to have done them, on the ledger's
// clock `now`: seconds_left within [0, kMaxProgressSecondsLeft] (a NaN as the bound). None
// without one.
inline std::optional<double> progress_eta_of(double now, std::optional<double> seconds_left) {
  if (!seconds_left) return std::nullopt;
  double left = *seconds_left;
  if (!(left <= kMaxProgressSecondsLeft)) left = kMaxProgressSecondsLeft;
  if (left < 0) left = 0;
  return now + left;
}

// Everything about a run that is known when it starts.
struct RunStart : RunIdentity {
  std::string fingerprint;  // of team + experiment + command, for the crash-loop guard (later)
  int pid = 0;              // the wrapper's pid
  // The real uid that admits it (the spool replays a row only for this user); none: the ledger
  // records its caller's getuid().
  std::optional<std::int64_t> uid;
  Mode mode = Mode::enforce;
  Money rate_per_hour;  // the allocated (maximum) burn rate
  // How that rate is priced (defaults.pricing, --pricing): FOCUS's PricingCategory and the
  // rollups key on it. None: unknown (a run recorded before the ledger kept it, schema v11).
  std::optional<Pricing> pricing;
  // A reserved run priced by one GPU or instance type: the policy's reserved price per unit and
  // hour it used (the commitment; FOCUS's Committed rows). Kept with the run, so that a report
  // without that policy, or after it changed, says the same (schema v16). None otherwise.
  std::optional<Money> commitment;
  Money reserve;  // rate x (grace + kill-after + 1 s of reaping slack)
  // --budget: the run's own cap, or with a job key the cap of the job across its runs.
  std::optional<Money> budget;
  Nanos shutdown{};  // grace + kill-after + reaping slack: how long it may spend after a trip
  Nanos sync{};      // its heartbeat interval: a heartbeat older than stale_after(sync) is lost
  Money want;        // the first ceiling asked for: rate x claim horizon + reserve
  std::vector<RunWebhook> webhooks = {};  // those that want its `lost` event
  std::string cwd;                        // the job's working directory; "" when not known
};

// How much of a budget a scope has used in the period of the run, for warnings and views.
struct ScopeUse {
  Scope scope;
  Period period = Period::total;
  Money amount;  // the budget
  Money spent;   // finished runs' spend + unfinished runs' last reported spend
  Money held;    // ceilings of unfinished runs
  // Other unfinished runs on the scope (a shared scope, when the grant was planned as a raise).
  std::optional<std::int64_t> other_runs;
  Money live;  // part of `spent`: unfinished runs' last reported spend
  // What is left to admit or raise: the budget less finished runs' spend and unfinished runs'
  // ceilings (BudgetView::remaining).
  Money remaining() const { return amount - (spent - live) - held; }
};

struct RunRecord;      // ledger_store.hpp
struct RollupRead;     // rollup.hpp
struct RollupVisitor;  // rollup.hpp

// A run whose result was kept (`spendcap accept`): cost per accepted result in reports.
struct AcceptedResult {
  std::string run_id, note, accepted_by;
  double accepted_at = 0;  // unix seconds, the ledger's clock
};

struct StopOrder {
  std::int64_t id = 0;
  Scope scope;  // team, experiment, user or run
  std::string reason, placed_by;
  double placed_at = 0;  // unix seconds, the ledger's clock
};

// Refused runs are rate-limited per user: the first kRecordedRefusalsPerMinute of a user in a
// minute of the ledger's clock are stored one row each (and told to the `refused` webhooks);
// later ones are only counted, in one row per user and minute (the refused_counts table), so that
// a loop of refused runs grows neither the shared ledger nor the owner's webhook receiver without
// bound. 10 a minute keeps every refusal of a person retrying by hand; a script looping on a
// refusal is told from the 11th on. PostgreSQL's spendcap_count_refusal holds the same number.
inline constexpr int kRecordedRefusalsPerMinute = 10;
struct RefusalCount {
  std::int64_t this_minute = 1;  // the user's refused runs this minute, this one included
  bool recorded = true;          // stored as a row; false: counted only
};

struct Grant {
  Money ceiling;  // what the run holds now; never lower than before
  // What enforce mode would hold. Equal to ceiling in enforce mode; a warn-mode run holds what it
  // asks for (it is not stopped) and learns from `allowed` when it would have been.
  Money allowed;
  std::optional<Scope> binding;  // the scope that limited `allowed` (none: granted in full)
  // `binding` is shared and holds more: the run holds its near-term need, a fair share
  // (GrantDecision::fair_share), raised at each heartbeat.
  bool fair_share = false;
  std::vector<ScopeUse> scopes;   // every budgeted scope of the run
  std::optional<StopOrder> stop;  // an active stop order on one of the run's scopes
};

struct Admission {
  bool admitted = false;
  Grant grant;
  std::optional<Money> run_budget;  // in effect: --budget lowered to the smallest max_run
  std::optional<Scope> lowered_by;  // the scope whose max_run lowered --budget
  std::string refusal;              // why not admitted, for the message and the ledger row
  std::optional<Scope> refused_by;
  // With a job key: what its finished runs spent, and the --budget of its latest earlier run
  // (so that the end line can give the job's total and a changed --budget can be said).
  std::optional<Money> job_spent_before;
  std::optional<Money> job_budget_before;
  RefusalCount refusal_count;  // a refused run: whether it was recorded or only counted
};

// preempted: stopped because the scheduler or the cloud took the machine back (SIGTERM to
// spendcap, a spot notice): not the job's failure, so the crash-loop guard does not count it.
enum class RunStatus { running, succeeded, failed, killed, refused, lost, preempted };
std::string to_string(RunStatus status);
std::optional<RunStatus> parse_run_status(std::string_view text);

struct RunFinal {
  std::string id;
  RunStatus status = RunStatus::succeeded;
  std::string reason;  // "exited", "budget:team:vision", "stop-order", "signal:SIGTERM", ...
  std::optional<int> exit_code;  // the command's own (128+N for a signal N); none: none
  Money spend;
  double elapsed_seconds = 0;  // launch until the tree was empty
  std::optional<RunGpu> gpu;   // what its GPUs did; none: GPU measurement did not run
  // What the job last reported on its progress channel (none: it did not report it).
  std::optional<std::string> metric_name;
  std::optional<double> metric_value, units, egress_gb;
  // --checkpoint-dir: its peak size and storage spend (part of `spend`); none: not measured.
  std::optional<double> storage_peak_gb;
  std::optional<Money> storage_spend;
  std::optional<RunLastProgress> last_progress;  // none: the job wrote no good progress line
  std::optional<RunCheckpoint> checkpoint;       // none: spendcap did not stop the run
  std::optional<int> spendcap_exit_code;         // spendcap's own exit status (124: a budget trip)
  // The tracker's run id the progress channel reported, set as the run's tag `tracker` with the
  // final row (as HeartbeatProgress::tracker; schema v25); none: the tags stay as they are.
  std::optional<std::string> tracker;
  // The time its steps still needed at its pace when it ended (HeartbeatProgress::seconds_left:
  // 0 once they were done), kept as progress_eta_at from the ledger's clock (schema v27); none:
  // the run's last heartbeat's stays (a replayed spooled row, which is not sent then).
  std::optional<double> progress_seconds_left;
};

// Where a run's own budget came from, recorded at admission (schema v19), in the words `runs`
// prints: "flag --budget", "flag --budget of job KEY", "max_run of team:vision" (a max_run lowered
// --budget or stood in for it), or, with no budget of its own, "budgets of team:vision, user:ana"
// (its budgeted scopes then). Both stores write the same words (BudgetLedger; PostgreSQL's
// spendcap_admit).
std::string budget_source_text(const std::optional<Money>& flag_budget,
                               const std::optional<Scope>& lowered_by, const std::string& job_key,
                               const std::vector<Scope>& budgeted_scopes);

// A run as the ledger shows it: its identity (the command as recorded: secrets redacted,
// command_redaction.hpp) and its state.
struct RunView : RunIdentity {
  int pid = 0;
  Mode mode = Mode::enforce;
  RunStatus status =
      RunStatus::running;   // `lost` also for an unfinished run with a stale heartbeat
  bool reconciled = false;  // charged its ceiling without a final row
  // Its final spend was above its ceiling: the supervisor could not trip in time (stopped with
  // no isolation, say). The spend is the true one; the status still says how it ended.
  bool overrun = false;
  std::optional<std::int64_t> uid;  // who admitted it; none for runs admitted before uids were kept
  Money reported_spend;  // the spend of its last heartbeat (a reconciled run's spend is c)
  std::string reason;
  std::optional<int> exit_code;           // the command's own
  std::optional<int> spendcap_exit_code;  // spendcap's; none: not recorded (before schema v21)
  Money spend, ceiling, rate_per_hour;
  std::optional<Pricing> pricing;  // none: unknown (recorded before schema v11)
  std::optional<Money> budget;
  double started_at = 0, heartbeat_at = 0;  // unix seconds, the ledger's clock
  std::optional<double> finished_at;
  std::optional<double> would_stop_at;  // warn mode: when it would have been stopped, and why
  std::string would_stop_reason;
  std::optional<RunGpu> gpu;  // none: no GPU record (run_gpu.hpp)
  std::string fingerprint;    // of team + experiment + command (the crash-loop guard's key)
  std::string cwd;            // "" when not recorded
  // The budget in effect at admission and where it came from (budget_source_text); source ""
  // for a run recorded before schema v19.
  std::optional<Money> run_budget;
  std::string budget_source;
  std::optional<std::string> metric_name;  // the progress channel's last metric (find_run only)
  std::optional<double> metric_value;
  std::optional<RunLastProgress> last_progress;  // find_run and the lists of runs (ps, runs)
  std::optional<RunCheckpoint> checkpoint;       // find_run only
  // When the run is expected to have done its steps at its pace (unix seconds, the ledger's
  // clock; schema v27), as of its last heartbeat with progress or its final row; none: not known.
  std::optional<double> progress_eta_at;
};

// spendcap's exit status for a run (`runs`, `show`: the status the shell saw, 124 for a budget
// trip), as recorded; a run before schema v21 that ended by itself exited as its command did.
inline std::optional<int> spendcap_exit_of(std::optional<int> recorded, RunStatus status,
                                           std::optional<int> command_exit) {
  if (recorded) return recorded;
  if (status == RunStatus::succeeded || status == RunStatus::failed) return command_exit;
  return std::nullopt;
}
inline std::optional<int> spendcap_exit_of(const RunView& run) {
  return spendcap_exit_of(run.spendcap_exit_code, run.status, run.exit_code);
}

struct BudgetView {
  BudgetRule rule;
  double period_start = 0;  // unix seconds; 0 for "total"
  Money spent;              // finished runs
  Money live;               // unfinished runs' last reported spend
  Money held;               // unfinished runs' ceilings
  Money overrun;            // part of `spent`: finished runs' spend above their ceilings
  Money remaining() const { return rule.amount - spent - held; }
};

// Whether a run (a RunStart or a RunView: anything with the scope fields) belongs to `scope`.
template <typename Run>
bool in_scope(const Run& run, const Scope& scope) {
  switch (scope.kind) {
    case ScopeKind::team:
      return run.team == scope.name;
    case ScopeKind::experiment:
      return run.experiment == scope.name;
    case ScopeKind::project:
      return run.project == scope.name;
    case ScopeKind::user:
      return run.user == scope.name;
    case ScopeKind::job:
      return run.job_key == scope.name;
    case ScopeKind::run:
      return run.id == scope.name;
  }
  return false;
}

// A heartbeat older than this means the wrapper is lost: three missed beats, and never less than
// the sync interval plus 2 s so that a short --sync does not turn a slow disk into lost runs.
Nanos stale_after(Nanos sync);

// A webhook event that was not delivered before its run's spendcap exited (issue 9), kept until a
// flush delivers it. The destination is named the way the policy named it ("env:NAME" for url_env,
// "url:URL" for a --webhook URL without credentials), never a secret URL; the signing secret is
// named by its variable too, and read again at each flush.
struct OutboxEntry {
  std::int64_t id = 0;  // > 0 once stored
  std::string event_id, event, run_id, user;
  std::string destination;
  std::string format;      // "json" or "slack"
  std::string secret_env;  // "" when unsigned
  std::string body;        // the exact body to post
  double created_at = 0;   // unix seconds, the ledger's clock
  int attempts = 0;
  std::string last_error;  // redacted
};

// A reconciled lost run whose `lost` event has not been queued yet, with the webhooks it had.
struct LostRun {
  RunView run;
  std::vector<RunWebhook> webhooks;
};

// `spendcap runs`: which runs to list, newest first (started_at, then id, descending). Each filter
// that is set must match exactly; the ledger applies them (parameterised SQL), not the caller.
struct RunQuery {
  double since = 0;      // started_at >= since (unix seconds, the ledger's clock)
  double until = 1e300;  // started_at < until
  std::optional<std::string> team, experiment, user;
  std::optional<RunStatus> status;  // as stored: `running` covers lost runs not yet reconciled
  int limit = 50;
};

// One listed run, and the length of the shortest prefix of its id that no other run in the
// ledger shares (at least kShortRunIdChars), as `runs` prints it and every run-id flag takes it.
struct ListedRun {
  RunView run;
  std::size_t unique_prefix = 0;
};
inline constexpr std::size_t kShortRunIdChars = 8;

struct CommandHistory {
  double now = 0;
  std::vector<RunView> runs;
};

class Ledger {
 public:
  virtual ~Ledger() = default;

  // "sqlite:/var/lib/spendcap/ledger.db": where it is, for messages and the spool; never holds a
  // password (redact_password).
  virtual std::string url() const = 0;

  // --- budgets (owned by the ledger's owner) ---
  // Whether the caller owns the ledger (may change budgets): the owner of the SQLite file, or root.
  virtual bool caller_is_owner() = 0;
  // A ledger only the caller writes (their own file, in a directory nobody else may write): there,
  // loading the caller's policy applies its budgets. A shared ledger changes budgets only through
  // `spendcap budgets apply`, so that one user's ./spendcap.json cannot rewrite everyone's.
  virtual bool is_personal() = 0;
  // Sets the budgets; `remove_others` also deletes budgets not in `rules` (`budgets apply`).
  // Throws Error when the caller is not the owner. A new amount binds new grants only.
  virtual void apply_budgets(const std::vector<BudgetRule>& rules, bool remove_others) = 0;
  virtual std::vector<BudgetRule> budget_rules() = 0;
  // Each budget in its current period.
  virtual std::vector<BudgetView> budgets() = 0;

  // --- runs ---
  // Records the run and asks for its first ceiling (`run.want`), in one transaction. Refused (and
  // recorded as refused) when a stop order covers one of its scopes, or when the grant could not
  // cover its reserve. Throws Error when the run has no budget at all (no --budget and no budgeted
  // scope): a run is never unbounded by accident.
  virtual Admission begin_run(const RunStart& run) = 0;
  // Reports the spend so far and asks to raise the ceiling to `want` (never lowers it); with
  // `progress`, records it as the run's last progress line and metric so far (and its tracker id
  // as the tag `tracker`, when it has one).
  virtual Grant heartbeat(const std::string& run_id, Money spend, Money want,
                          const std::optional<HeartbeatProgress>& progress = std::nullopt) = 0;
  // Warn mode: the run would have been stopped now, for `reason`.
  virtual void record_would_stop(const std::string& run_id, const std::string& reason) = 0;
  // Finalises the run and releases its ceiling. Idempotent: a run already final is left as it is
  // and false is returned, except a reconciled lost run, whose charge this replaces. A final with
  // a tracker id sets the run's tag `tracker` to it.
  virtual bool finish_run(const RunFinal& final) = 0;
  // Unfinished runs (running, and lost ones not yet reconciled), oldest first.
  virtual std::vector<RunView> active_runs() = 0;
  // Runs whose final spend went above their ceiling (an overrun: the supervisor and its guard were
  // stopped), started within the last `days` UTC days, oldest first.
  virtual std::vector<RunView> overrun_runs(int days) = 0;
  virtual std::optional<RunView> find_run(const std::string& run_id) = 0;
  // The runs `query` selects, newest first, at most query.limit of them.
  virtual std::vector<ListedRun> list_runs(const RunQuery& query) = 0;
  // The ids of runs (any status) that start with `prefix`, in id order, at most `limit`.
  virtual std::vector<std::string> run_ids_with_prefix(const std::string& prefix, int limit) = 0;
  // Charges every lost run whose reconciliation time has passed its ceiling. Every transaction
  // above does this first; returns how many it reconciled.
  virtual int reconcile_lost_runs() = 0;

  // Lost runs charged their ceiling (reconciled, no final row yet) that started within the last
  // `days` UTC days, oldest first.
  virtual std::vector<RunView> lost_runs(int days) = 0;
  // Reconciled lost runs with webhooks whose `lost` event is not queued yet.
  virtual std::vector<LostRun> untold_lost_runs() = 0;
  // Marks the run's `lost` event told and stores `entries` in the outbox, in one transaction and
  // once: false (nothing stored) when another reconciler told it first or it is no longer lost.
  virtual bool tell_lost_run(const std::string& run_id,
                             const std::vector<OutboxEntry>& entries) = 0;

  // --- stop orders (who may: ledger/stop_rule.hpp; refused with Error, 125) ---
  virtual StopOrder place_stop_order(const Scope& scope, const std::string& reason,
                                     const std::string& placed_by) = 0;
  // Clears the active orders on `scope`; returns how many.
  virtual int clear_stop_orders(const Scope& scope) = 0;
  virtual std::vector<StopOrder> active_stop_orders() = 0;

  // --- budget warnings, once per threshold and period (issue 30) ---
  // Records that `percents` (ascending) of `scope`'s budget in its current `period` (the ledger's
  // clock) were announced by `run_id`; true when the last (the highest) had not been announced by
  // any run before: this run sends its webhook, every other run of the scope sends none. A ledger
  // that keeps no such record says true (each run announces).
  virtual bool claim_warning(const Scope& scope, Period period, const std::vector<int>& percents,
                             const std::string& run_id) {
    (void)scope, (void)period, (void)percents, (void)run_id;
    return true;
  }

  // --- the webhook outbox (notify/) ---
  // Stores the entry (its id and created_at are the ledger's) and returns its id.
  virtual std::int64_t add_outbox(const OutboxEntry& entry) = 0;
  // The entries of `user` ("" for every user), oldest first.
  virtual std::vector<OutboxEntry> outbox(const std::string& user) = 0;
  virtual void remove_outbox(std::int64_t id) = 0;
  // A flush that failed: one more attempt, and why; its claim is given up.
  virtual void note_outbox_failure(std::int64_t id, const std::string& error) = 0;
  // Claims the entries `ids` for one delivery by `claimer` (a run id; "" for `outbox flush`), in
  // one transaction, and returns the ids it got, so that two spendcaps never send one entry at
  // once (issue 33: every run resent the whole outbox). An entry is free when its last claim is
  // older than the `hold` it was made for and the run that made it, if any, no longer runs with
  // a fresh heartbeat; a failed delivery (note_outbox_failure) frees it at once.
  virtual std::vector<std::int64_t> claim_outbox(const std::vector<std::int64_t>& ids,
                                                 const std::string& claimer, Nanos hold) = 0;
  // --- reports (report/report.hpp) ---
  // Calls `each` for every run that started in [since, until) (the ledger's clock), in no given
  // order, streamed rather than held. See StoreTxn::for_each_run_started for the fields filled.
  virtual void for_each_run_started(double since, double until,
                                    const std::function<void(const RunRecord&)>& each) = 0;
  // The rollups of `read` (rollup.hpp), in one snapshot: its cells, then their metric ranges, the
  // runs of its run ranges and the unfinished runs of its spans as rows (`visit.run`), and the
  // accepted finished runs of its spans (`visit.accepted`). Lost runs due are reconciled first.
  // False, having called nothing: this ledger keeps no rollups (the caller reads every run).
  virtual bool read_rollups(const RollupRead& read, const RollupVisitor& visit) {
    (void)read, (void)visit;
    return false;
  }
  // Marks the run's result as the one kept (`spendcap accept`); accepting it again replaces the
  // note. Throws Error (exit 125) for a run the ledger does not hold, one still running, or one
  // the caller may not act on (ledger/stop_rule.hpp).
  virtual AcceptedResult accept_run(const std::string& run_id, const std::string& note,
                                    const std::string& accepted_by) = 0;
  virtual std::vector<AcceptedResult> accepted_results() = 0;  // by run id
  // --- the crash-loop guard ---
  // The runs of one command fingerprint started within the last `window_seconds` that can move the
  // crash-loop verdict (each user's earlier successes left out: ledger_store.hpp's
  // runs_of_fingerprint), oldest first, and the ledger's clock now (unix seconds).
  virtual CommandHistory command_history(const std::string& fingerprint, double window_seconds) = 0;
  // Records a run refused before admission (runaway:crash-loop): a refused row that holds nothing,
  // or, past kRecordedRefusalsPerMinute of its user, only counted.
  virtual RefusalCount record_refused(const RunStart& run, const std::string& reason) = 0;
};

// Who asks the ledger to stop or accept runs (ledger/stop_rule.hpp). `user` is the Unix user name
// runs record (the real uid's); `in_group` says whether the caller is in a Unix group, by name.
// Whether it owns the ledger is the store's to say.
struct Caller {
  std::string user;
  std::function<bool(const std::string& group)> in_group = [](const std::string&) { return false; };
};

struct LedgerOptions {
  // The ledger's clock in unix seconds (tests move it). SQLite's ledger is on one host, so the
  // host's clock is the ledger's clock.
  std::function<double()> wall_clock;
  // Test-only (the negative control of the concurrency test): grants ignore every other run, so
  // concurrent runs overshoot shared budgets. Never set outside tests.
  bool ignore_other_runs = false;
  // A locked policy's budgets. For a scope capped here, the amount and max_run in force are the
  // lower of its ledger row's and the cap's, in the cap's period (a cap without a row is in force
  // as it is), so that a row raised in the ledger cannot loosen what the runner's owner locked.
  // Grants, heartbeats and views all read budgets through this.
  std::vector<BudgetRule> budget_caps;
  // False: open only a ledger that exists (a setgid install's ledger is created by its owner).
  bool create_if_missing = true;
  // Whom stop orders and accepted results are checked against (ledger/stop_rule.hpp); none: the
  // calling process (current_caller()). Tests set another.
  std::optional<Caller> caller;
  // PostgreSQL: the connection's password (the policy's ledger_password_file), given to libpq as
  // a connection parameter, never in a URL; "" for none (the URL's, or libpq's own ways).
  std::string postgres_password;
};

}  // namespace spendcap
