// The SQLite store's runs: reading and writing a run's row, the look-ups the rules make, and lost
// runs' events. Contract in ledger_store.hpp.
#include "sqlite_impl.hpp"

#include <nlohmann/json.hpp>

#include "spendcap/base/json_text.hpp"
#include "spendcap/ledger/stored_text.hpp"

namespace spendcap {

RunRecord SqliteStore::Impl::read_run(Query& q) {
  RunRecord r;
  r.id = q.text(0);
  r.job_key = q.text(1);
  r.team = q.text(2);
  r.experiment = q.text(3);
  r.project = q.text(4);
  r.user = q.text(5);
  r.tags = tags_of_json(q.text(6));
  r.command = command_of_json(q.text(7));
  r.fingerprint = q.text(8);
  r.host = q.text(9);
  r.pid = q.i32(10);
  r.mode = parse_mode(q.text(11)).value_or(Mode::enforce);
  r.status = parse_run_status(q.text(12)).value_or(RunStatus::running);
  r.reason = q.text(13);
  if (!q.is_null(14)) r.exit_code = q.i32(14);
  r.rate_per_hour = q.money(15);
  r.reserve = q.money(16);
  r.budget = q.optional_money(17);
  r.shutdown = std::chrono::milliseconds(q.i64(18));
  r.sync = std::chrono::milliseconds(q.i64(19));
  r.started_at = q.f64(20);
  r.day = q.i64(21);
  r.heartbeat_at = q.f64(22);
  r.reconcile_at = q.f64(23);
  r.finished_at = q.optional_f64(24);
  r.spend = q.money(25);
  r.ceiling = q.money(26);
  r.allowed = q.money(27);
  r.reconciled = q.i64(28) != 0;
  r.would_stop_at = q.optional_f64(29);
  r.would_stop_reason = q.text(30);
  r.elapsed_seconds = q.optional_f64(31);
  if (!q.is_null(32)) r.uid = q.i64(32);
  r.reported_spend = q.money(33);
  r.overrun = q.i64(34) != 0;
  if (!q.is_null(35)) {
    RunGpu& g = r.gpu.emplace();
    g.not_measured = q.text(36);
    if (!q.is_null(37)) g.devices = q.i32(37);
    g.allocated_seconds = q.optional_f64(38).value_or(0);
    g.busy_seconds = q.optional_f64(39);
    g.idle_spend = q.optional_money(40);
    g.energy_kwh = q.optional_f64(41);
    g.co2_kg = q.optional_f64(42);
    g.energy_cost = q.optional_money(43);
    g.sources = q.text(44);
    g.timeline = timeline_from_text(q.text(45));
  }
  r.pricing = pricing_of_column(q.optional_text(46));
  r.commitment = q.optional_money(47);
  if (!q.is_null(48)) r.cwd = q.text(48);
  r.run_budget = q.optional_money(49);
  if (!q.is_null(50)) r.budget_source = q.text(50);
  if (!q.is_null(51)) r.spendcap_exit_code = q.i32(51);
  if (!q.is_null(54)) {
    RunLastProgress& progress = r.last_progress.emplace();
    if (!q.is_null(52)) progress.step = q.i64(52);
    if (!q.is_null(53)) progress.total_steps = q.i64(53);
    progress.line = q.text(54);
  }
  r.progress_eta_at = q.optional_f64(55);
  return r;
}

std::optional<RunRecord> SqliteStore::Impl::find_run(const std::string& id) {
  auto q = query("SELECT " SPENDCAP_RUN_COLUMNS " FROM runs WHERE id = ?");
  q.bind(id);
  if (!q.step()) return std::nullopt;
  RunRecord run = read_run(q);
  read_progress(run);
  return run;
}

// The metric, storage and checkpoint columns (v5, v10, v19), outside SPENDCAP_RUN_COLUMNS: only
// find_run needs them. (The last progress line and its ETA are in every read: `ps` shows them.)
void SqliteStore::Impl::read_progress(RunRecord& run) {
  auto q = query(
      "SELECT metric_name, metric_value, units, egress_gb, storage_peak_gb, storage_spend_micros, "
      "checkpoint_signal, checkpoint_signalled, checkpoint_signal_seconds, "
      "checkpoint_written_seconds FROM runs WHERE id = ?");
  q.bind(run.id);
  if (!q.step()) return;
  if (!q.is_null(0)) run.metric_name = q.text(0);
  run.metric_value = q.optional_f64(1);
  run.units = q.optional_f64(2);
  run.egress_gb = q.optional_f64(3);
  run.storage_peak_gb = q.optional_f64(4);
  run.storage_spend = q.optional_money(5);
  if (!q.is_null(6)) {
    RunCheckpoint& checkpoint = run.checkpoint.emplace();
    checkpoint.signal = q.text(6);
    checkpoint.signalled = q.is_null(7) ? 0 : q.i32(7);
    checkpoint.signal_seconds = q.optional_f64(8).value_or(0);
    checkpoint.written_seconds = q.optional_f64(9);
  }
}

void SqliteStore::Impl::insert_run(const RunRecord& r) {
  auto q = query(
      "INSERT INTO runs (" SPENDCAP_RUN_COLUMNS
      ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
      "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
      "NULL, NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  q.bind_all(r.id, r.job_key.empty() ? std::nullopt : std::optional<std::string>(r.job_key), r.team,
             r.experiment, r.project, r.user, json_of(r.tags), json_of(r.command), r.fingerprint,
             r.host, r.pid, to_string(r.mode), to_string(r.status), r.reason, r.exit_code,
             r.rate_per_hour, r.reserve, r.budget, to_ms_rounded_up(r.shutdown),
             to_ms_rounded_up(r.sync), r.started_at, r.day, r.heartbeat_at, r.reconcile_at,
             r.finished_at, r.spend, r.ceiling, r.allowed, r.reconciled ? 1 : 0, r.would_stop_at,
             r.would_stop_reason, r.elapsed_seconds, r.uid, r.reported_spend, r.overrun ? 1 : 0,
             pricing_column(r.pricing), r.commitment,
             r.cwd.empty() ? std::nullopt : std::optional<std::string>(r.cwd), r.run_budget,
             r.budget_source.empty() ? std::nullopt : std::optional<std::string>(r.budget_source),
             r.spendcap_exit_code);
  const std::optional<RunLastProgress>& p = r.last_progress;
  q.bind_all(p ? p->step : std::nullopt, p ? p->total_steps : std::nullopt,
             p ? std::optional<std::string>(p->line) : std::nullopt, r.progress_eta_at);
  q.run();
}

// One UPDATE: the columns every update writes, then each group of columns only where the record
// has it (a heartbeat's record may not carry what the final row did). Each shape of the statement
// is prepared once and cached by its text.
void SqliteStore::Impl::update_run(const RunRecord& r) {
  bool metric = r.metric_name || r.units || r.egress_gb;
  bool storage = r.storage_peak_gb || r.storage_spend;
  std::string sql =
      "UPDATE runs SET status = ?, reason = ?, exit_code = ?, heartbeat_at = ?, reconcile_at = ?, "
      "finished_at = ?, spend_micros = ?, ceiling_micros = ?, allowed_micros = ?, reconciled = ?, "
      "would_stop_at = ?, would_stop_reason = ?, elapsed_seconds = ?, reported_spend_micros = ?, "
      "overrun = ?, spendcap_exit_code = ?";
  if (metric) sql += ", metric_name = ?, metric_value = ?, units = ?, egress_gb = ?";
  if (storage) sql += ", storage_peak_gb = ?, storage_spend_micros = ?";
  if (r.last_progress) {
    sql += ", progress_step = ?, progress_total_steps = ?, progress_line = ?, progress_eta_at = ?";
  }
  if (r.checkpoint) {
    sql +=
        ", checkpoint_signal = ?, checkpoint_signalled = ?, checkpoint_signal_seconds = ?, "
        "checkpoint_written_seconds = ?";
  }
  sql += " WHERE id = ?";
  auto q = query(sql);
  q.bind_all(to_string(r.status), r.reason, r.exit_code, r.heartbeat_at, r.reconcile_at,
             r.finished_at, r.spend, r.ceiling, r.allowed, r.reconciled ? 1 : 0, r.would_stop_at,
             r.would_stop_reason, r.elapsed_seconds, r.reported_spend, r.overrun ? 1 : 0,
             r.spendcap_exit_code);
  if (metric) q.bind_all(r.metric_name, r.metric_value, r.units, r.egress_gb);
  if (storage) q.bind_all(r.storage_peak_gb, r.storage_spend);
  if (const auto& p = r.last_progress) {
    q.bind_all(p->step, p->total_steps, p->line, r.progress_eta_at);
  }
  if (const auto& c = r.checkpoint) {
    q.bind_all(c->signal, c->signalled, c->signal_seconds, c->written_seconds);
  }
  q.bind_all(r.id);
  q.run();
  if (r.gpu) update_run_gpu(r.id, *r.gpu);
}

// The tags are one JSON text: read, the one key set, written back (in the caller's write
// transaction). Not a rollup column: the journal's trigger does not fire.
void SqliteStore::Impl::set_run_tracker(const std::string& id, const std::string& tracker) {
  auto read = query("SELECT tags FROM runs WHERE id = ?");
  read.bind(id);
  if (!read.step()) return;
  std::map<std::string, std::string> tags = tags_of_json(read.text(0));
  if (auto it = tags.find("tracker"); it != tags.end() && it->second == tracker) return;
  tags["tracker"] = tracker;
  auto q = query("UPDATE runs SET tags = ? WHERE id = ?");
  q.bind_all(json_of(tags), id);
  q.run();
}

void SqliteStore::Impl::update_run_gpu(const std::string& id, const RunGpu& g) {
  auto q = query(
      "UPDATE runs SET gpu_measured = ?, gpu_not_measured = ?, gpu_devices = ?, "
      "gpu_allocated_seconds = ?, gpu_busy_seconds = ?, gpu_idle_spend_micros = ?, "
      "gpu_energy_kwh = ?, gpu_co2_kg = ?, gpu_energy_cost_micros = ?, gpu_sources = ?, "
      "gpu_timeline = ? WHERE id = ?");
  bool measured = g.not_measured.empty();
  q.bind_all(measured ? 1 : 0, g.not_measured,
             measured ? std::optional<int>(g.devices) : std::nullopt,
             measured ? std::optional<double>(g.allocated_seconds) : std::nullopt, g.busy_seconds,
             g.idle_spend, g.energy_kwh, g.co2_kg, g.energy_cost, g.sources,
             timeline_to_text(g.timeline), id);
  q.run();
}

std::vector<RunRecord> SqliteStore::Impl::unfinished_runs() {
  // By the partial index of unfinished runs, then sorted: the unary + keeps SQLite from walking
  // the index on started_at (v14) over every run to skip the sort.
  auto q = query("SELECT " SPENDCAP_RUN_COLUMNS
                 " FROM runs WHERE status = 'running' ORDER BY +started_at, id");
  return read_runs(q);
}

std::vector<RunRecord> SqliteStore::Impl::overrun_runs(std::int64_t since_day) {
  auto q = query("SELECT " SPENDCAP_RUN_COLUMNS
                 " FROM runs WHERE overrun = 1 AND day >= ? ORDER BY started_at, id");
  q.bind_all(since_day);
  return read_runs(q);
}

std::vector<RunRecord> SqliteStore::Impl::runs_due(double now) {
  // Every write transaction asks, and almost always none is due: the look-up of any_run_due
  // compiles in a tenth of the time of a statement reading every column.
  if (!any_run_due(now)) return {};
  auto q = query("SELECT " SPENDCAP_RUN_COLUMNS
                 " FROM runs WHERE status = 'running' AND reconcile_at <= ?");
  q.bind(now);
  return read_runs(q);
}

bool SqliteStore::Impl::any_run_due(double now) {
  auto q = query("SELECT 1 FROM runs WHERE status = 'running' AND reconcile_at <= ? LIMIT 1");
  q.bind(now);
  return q.step();
}

std::vector<RunRecord> SqliteStore::Impl::runs_of_fingerprint(const std::string& fingerprint,
                                                              double since) {
  // Every run but the succeeded ones a later success of the same user supersedes: a command run
  // a thousand times in the window decodes a few rows, not a thousand (ledger_store.hpp).
  auto q = query("SELECT " SPENDCAP_RUN_COLUMNS " FROM runs WHERE id IN (" SPENDCAP_CRASH_LOOP_IDS
                 ") ORDER BY started_at, id");
  q.bind_all(fingerprint, since);
  return read_runs(q);
}

std::vector<RunRecord> SqliteStore::Impl::list_runs(const RunQuery& rq) {
  // One statement for every filter: an unset filter is bound NULL and matches every row.
  auto q = query("SELECT " SPENDCAP_RUN_COLUMNS
                 " FROM runs WHERE started_at >= ?1 AND started_at < ?2"
                 " AND (?3 IS NULL OR team = ?3) AND (?4 IS NULL OR experiment = ?4)"
                 " AND (?5 IS NULL OR user_name = ?5) AND (?6 IS NULL OR status = ?6)"
                 " ORDER BY started_at DESC, id DESC LIMIT ?7");
  std::optional<std::string> status;
  if (rq.status) status = to_string(*rq.status);
  q.bind_all(rq.since, rq.until, rq.team, rq.experiment, rq.user, status, rq.limit);
  return read_runs(q);
}

std::vector<std::string> SqliteStore::Impl::run_ids_with_prefix(const std::string& prefix,
                                                                int limit) {
  // substr, not LIKE: a prefix holding % or _ matches itself only.
  auto q = query("SELECT id FROM runs WHERE substr(id, 1, ?) = ? ORDER BY id LIMIT ?");
  q.bind_all(static_cast<std::int64_t>(prefix.size()), prefix, limit);
  std::vector<std::string> ids;
  while (q.step()) ids.push_back(q.text(0));
  return ids;
}

std::pair<std::string, std::string> SqliteStore::Impl::neighbour_run_ids(const std::string& id) {
  std::pair<std::string, std::string> around;
  {
    auto q = query("SELECT max(id) FROM runs WHERE id < ?");
    q.bind(id);
    if (q.step()) around.first = q.text(0);
  }
  auto q = query("SELECT min(id) FROM runs WHERE id > ?");
  q.bind(id);
  if (q.step()) around.second = q.text(0);
  return around;
}

std::vector<RunRecord> SqliteStore::Impl::runs_of_job(const std::string& job_key) {
  auto q = query("SELECT " SPENDCAP_RUN_COLUMNS " FROM runs WHERE job_key = ?");
  q.bind(job_key);
  return read_runs(q);
}

// The runs of one scope (bound: first day, last day, scope kind, scope name) started in a range of
// days: the scope's kind names the column that holds its name.
constexpr const char* kRunsOfScopeInDays =
    "day BETWEEN ? AND ? AND CASE ? WHEN 'team' THEN team WHEN 'experiment' THEN experiment "
    "WHEN 'project' THEN project WHEN 'user' THEN user_name END = ?";

std::int64_t SqliteStore::Impl::count_unfinished(const Scope& scope, DayRange days) {
  auto q = query(std::string("SELECT count(*) FROM runs WHERE status = 'running' AND ") +
                 kRunsOfScopeInDays);
  q.bind_all(days.first_day, days.last_day, to_string(scope.kind), scope.name);
  q.step();
  return q.i64(0);
}

Money SqliteStore::Impl::overrun(const Scope& scope, DayRange days) {
  auto q =
      query(std::string("SELECT COALESCE(SUM(spend_micros - ceiling_micros), 0) FROM runs WHERE "
                        "overrun = 1 AND ") +
            kRunsOfScopeInDays);
  q.bind_all(days.first_day, days.last_day, to_string(scope.kind), scope.name);
  q.step();
  return q.money(0);
}

// ---- lost runs' events (v12) ----

void SqliteStore::Impl::put_run_webhooks(const std::string& run_id,
                                         const std::vector<RunWebhook>& hooks) {
  query("INSERT INTO run_webhooks (run_id, webhooks) VALUES (?, ?)")
      .bind_all(run_id, webhooks_json(hooks))
      .run();
}

std::vector<std::pair<RunRecord, std::vector<RunWebhook>>> SqliteStore::Impl::untold_lost_runs() {
  std::vector<std::pair<RunRecord, std::vector<RunWebhook>>> lost;
  // Every run asks after its admission, and there is almost never one (as runs_due).
  if (!query("SELECT 1 FROM run_webhooks WHERE lost_told_at IS NULL AND run_id IN "
             "(SELECT id FROM runs WHERE reconciled = 1) LIMIT 1")
           .step()) {
    return lost;
  }
  auto q = query("SELECT " SPENDCAP_RUN_COLUMNS
                 " FROM runs WHERE reconciled = 1 AND id IN (SELECT run_id FROM run_webhooks "
                 "WHERE lost_told_at IS NULL) ORDER BY started_at, id");
  for (RunRecord& run : read_runs(q)) {
    auto hooks = query("SELECT webhooks FROM run_webhooks WHERE run_id = ?");
    hooks.bind(run.id);
    std::vector<RunWebhook> named =
        hooks.step() ? webhooks_of_json(hooks.text(0)) : std::vector<RunWebhook>{};
    lost.emplace_back(std::move(run), std::move(named));
  }
  return lost;
}

bool SqliteStore::Impl::claim_lost_run(const std::string& run_id, double at,
                                       const std::vector<OutboxEntry>& entries) {
  // The write lock makes this the one claim: a second reconciler finds lost_told_at set.
  query(
      "UPDATE run_webhooks SET lost_told_at = ? WHERE run_id = ? AND lost_told_at IS NULL "
      "AND run_id IN (SELECT id FROM runs WHERE reconciled = 1)")
      .bind_all(at, run_id)
      .run();
  if (changes() != 1) return false;
  for (const OutboxEntry& entry : entries) insert_outbox(entry);
  return true;
}

std::vector<RunRecord> SqliteStore::Impl::reconciled_runs(std::int64_t since_day) {
  auto q = query("SELECT " SPENDCAP_RUN_COLUMNS
                 " FROM runs WHERE reconciled = 1 AND day >= ? ORDER BY started_at, id");
  q.bind_all(since_day);
  return read_runs(q);
}

}  // namespace spendcap
