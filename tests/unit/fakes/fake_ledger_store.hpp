// FakeLedgerStore: the LedgerStore seam (ledger_store.hpp) in memory, so that BudgetLedger's rules
// are tested without a database. Every store made from one FakeLedgerState is a connection to the
// same ledger: transact() serialises them with one mutex (a single write lock, as SQLite's) and
// restores the state when the body throws (a rollback). It records each lock_scopes() call, so
// tests can check the order in which the rules take the scopes.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "spendcap/ledger/ledger_store.hpp"

namespace spendcap::testing {

struct FakeLedgerData {
  std::map<std::string, RunRecord> runs;  // by id
  std::map<Scope, BudgetRule> rules;
  std::map<std::pair<Scope, std::int64_t>, Usage> usage;  // by scope and day
  std::vector<std::pair<StopOrder, bool>> stop_orders;    // with: cleared
  std::vector<std::vector<Scope>> locks_taken;            // each lock_scopes() call
  // Run once by the next lock_scopes(): what another connection commits while this one waits
  // for the locks (PostgreSQL's read committed lets it write between a read and the locks).
  std::function<void()> on_next_lock;
  std::vector<OutboxEntry> outbox;
  std::int64_t last_outbox_id = 0;
  std::map<std::int64_t, OutboxClaim> outbox_claims;  // by entry id; absent: never claimed
  std::map<std::string, AcceptedResult> accepted;     // by run id
  // Budget warnings announced: scope, period day, percent -> the run that announced it.
  std::map<std::tuple<Scope, std::int64_t, int>, std::string> warnings;
};

struct FakeLedgerState {
  std::mutex mutex;
  FakeLedgerData data;
  bool caller_is_owner = true, is_personal = true;
};

class FakeLedgerStore final : public LedgerStore, private StoreTxn {
 public:
  FakeLedgerStore(std::shared_ptr<FakeLedgerState> state, std::function<double()> clock)
      : state_(std::move(state)), clock_(std::move(clock)) {}

  std::string url() const override { return "fake:memory"; }
  void transact(Access, const std::function<void(StoreTxn&)>& body) override {
    std::lock_guard lock(state_->mutex);
    FakeLedgerData before = state_->data;
    try {
      body(*this);
    } catch (...) {
      state_->data = std::move(before);
      throw;
    }
  }
  bool caller_is_owner() override { return state_->caller_is_owner; }
  bool is_personal() override { return state_->is_personal; }
  std::string owner_name() override { return "alice"; }

  // The usage rows against a recomputation from the runs, one line per difference (zero rows and
  // missing rows are the same thing).
  static std::vector<std::string> inconsistencies(const FakeLedgerData& data) {
    std::map<std::pair<Scope, std::int64_t>, Usage> expected;
    for (const auto& [id, run] : data.runs) {
      for (const Scope& scope : named(run)) {
        Usage& row = expected[{scope, run.day}];
        if (run.status == RunStatus::running) {
          row.held += run.ceiling;
          row.live += run.spend;
        } else {
          row.spent += run.spend;
        }
      }
    }
    std::vector<std::string> problems;
    auto same = [](const Usage& a, const Usage& b) {
      return a.spent == b.spent && a.held == b.held && a.live == b.live;
    };
    for (const auto& rows : {expected, data.usage}) {
      for (const auto& [key, row] : rows) {
        auto in = [&](const auto& map) {
          auto found = map.find(key);
          return found == map.end() ? Usage{} : found->second;
        };
        if (!same(in(expected), in(data.usage))) {
          problems.push_back("usage " + to_string(key.first) + " day " +
                             std::to_string(key.second));
        }
      }
    }
    return problems;
  }

 private:
  static std::vector<Scope> named(const RunRecord& run) {
    std::vector<Scope> scopes;
    for (auto [kind, name] :
         {std::pair{ScopeKind::team, run.team}, std::pair{ScopeKind::experiment, run.experiment},
          std::pair{ScopeKind::project, run.project}, std::pair{ScopeKind::user, run.user}}) {
      if (!name.empty()) scopes.push_back({kind, name});
    }
    return scopes;
  }
  FakeLedgerData& data() { return state_->data; }

  // ---- the webhook outbox ----
  std::int64_t insert_outbox(const OutboxEntry& entry) override {
    OutboxEntry stored = entry;
    stored.id = ++data().last_outbox_id;
    data().outbox.push_back(stored);
    return stored.id;
  }
  std::vector<OutboxEntry> outbox_entries(const std::string& user) override {
    std::vector<OutboxEntry> entries;
    for (const OutboxEntry& e : data().outbox) {
      if (user.empty() || e.user == user) entries.push_back(e);
    }
    return entries;
  }
  void delete_outbox(std::int64_t id) override {
    std::erase_if(data().outbox, [id](const OutboxEntry& e) { return e.id == id; });
  }
  void update_outbox_failure(std::int64_t id, const std::string& error) override {
    for (OutboxEntry& e : data().outbox) {
      if (e.id == id) {
        ++e.attempts;
        e.last_error = error;
        data().outbox_claims.erase(id);
      }
    }
  }
  std::optional<OutboxClaim> outbox_claim(std::int64_t id) override {
    for (const OutboxEntry& e : data().outbox) {
      if (e.id == id) {
        auto found = data().outbox_claims.find(id);
        return found == data().outbox_claims.end() ? OutboxClaim{} : found->second;
      }
    }
    return std::nullopt;
  }
  void set_outbox_claim(std::int64_t id, const OutboxClaim& claim) override {
    data().outbox_claims[id] = claim;
  }

  // ---- StoreTxn ----
  double now() override { return clock_(); }
  void lock_scopes(const std::vector<Scope>& scopes) override {
    data().locks_taken.push_back(scopes);
    if (data().on_next_lock) std::exchange(data().on_next_lock, nullptr)();
  }

  std::optional<RunRecord> find_run(const std::string& id) override {
    auto found = data().runs.find(id);
    if (found == data().runs.end()) return std::nullopt;
    return found->second;
  }
  void insert_run(const RunRecord& run) override { data().runs.emplace(run.id, run); }
  // As the real stores: a GPU record and a progress report are written only when the run carries
  // them, and otherwise kept.
  void update_run(const RunRecord& run) override {
    RunRecord& stored = data().runs.at(run.id);
    RunRecord updated = run;
    if (!updated.gpu) updated.gpu = stored.gpu;
    if (!updated.metric_name && !updated.units && !updated.egress_gb) {
      updated.metric_name = stored.metric_name;
      updated.metric_value = stored.metric_value;
      updated.units = stored.units;
      updated.egress_gb = stored.egress_gb;
    }
    // As the stores: admission's facts never change; the final row's are kept unless given.
    updated.cwd = stored.cwd;
    updated.run_budget = stored.run_budget;
    updated.budget_source = stored.budget_source;
    updated.tags = stored.tags;  // set_run_tracker's only
    if (!updated.last_progress) updated.last_progress = stored.last_progress;
    if (!updated.checkpoint) updated.checkpoint = stored.checkpoint;
    stored = std::move(updated);
  }
  void set_run_tracker(const std::string& id, const std::string& tracker) override {
    data().runs.at(id).tags["tracker"] = tracker;
  }
  void for_each_run_started(double since, double until,
                            const std::function<void(const RunRecord&)>& each) override {
    for (const auto& [id, run] : data().runs) {
      if (run.started_at >= since && run.started_at < until) each(run);
    }
  }
  void put_accepted_result(const AcceptedResult& accepted) override {
    data().accepted[accepted.run_id] = accepted;
  }
  std::vector<AcceptedResult> accepted_results() override {
    std::vector<AcceptedResult> results;
    for (const auto& [id, accepted] : data().accepted) results.push_back(accepted);
    return results;
  }
  std::vector<RunRecord> unfinished_runs() override {
    std::vector<RunRecord> runs = select([](const RunRecord&) { return true; });
    std::sort(runs.begin(), runs.end(), [](const RunRecord& a, const RunRecord& b) {
      return std::tie(a.started_at, a.id) < std::tie(b.started_at, b.id);
    });
    return runs;
  }
  std::vector<RunRecord> overrun_runs(std::int64_t since_day) override {
    std::vector<RunRecord> runs;
    for (const auto& [id, run] : data().runs) {
      if (run.overrun && run.day >= since_day) runs.push_back(run);
    }
    std::sort(runs.begin(), runs.end(), [](const RunRecord& a, const RunRecord& b) {
      return std::tie(a.started_at, a.id) < std::tie(b.started_at, b.id);
    });
    return runs;
  }
  std::vector<RunRecord> runs_due(double now) override {
    return select([&](const RunRecord& run) { return run.reconcile_at <= now; });
  }
  bool any_run_due(double now) override { return !runs_due(now).empty(); }
  std::vector<RunRecord> all_runs() override {
    std::vector<RunRecord> runs;
    for (const auto& [id, run] : data().runs) runs.push_back(run);
    std::sort(runs.begin(), runs.end(), [](const RunRecord& a, const RunRecord& b) {
      return std::tie(a.started_at, a.id) < std::tie(b.started_at, b.id);
    });
    return runs;
  }
  std::vector<RunRecord> runs_of_fingerprint(const std::string& fingerprint,
                                             double since) override {
    std::vector<RunRecord> runs;
    std::map<std::string, double> latest_success;  // per user, as the real stores
    auto ended_at = [](const RunRecord& run) { return run.finished_at.value_or(run.started_at); };
    for (const auto& [id, run] : data().runs) {
      if (run.fingerprint != fingerprint || run.started_at < since) continue;
      if (run.status != RunStatus::succeeded) continue;
      auto [at, added] = latest_success.emplace(run.user, ended_at(run));
      if (!added) at->second = std::max(at->second, ended_at(run));
    }
    for (const auto& [id, run] : data().runs) {
      if (run.fingerprint != fingerprint || run.started_at < since) continue;
      if (run.status == RunStatus::succeeded && ended_at(run) < latest_success[run.user] &&
          run.tags.count("crash_loop_cleared") == 0) {
        continue;
      }
      runs.push_back(run);
    }
    std::sort(runs.begin(), runs.end(), [](const RunRecord& a, const RunRecord& b) {
      return std::tie(a.started_at, a.id) < std::tie(b.started_at, b.id);
    });
    return runs;
  }
  std::vector<RunRecord> list_runs(const RunQuery& q) override {
    std::vector<RunRecord> runs;
    for (const auto& [id, run] : data().runs) {
      if (run.started_at < q.since || run.started_at >= q.until) continue;
      if ((q.team && run.team != *q.team) || (q.experiment && run.experiment != *q.experiment) ||
          (q.user && run.user != *q.user) || (q.status && run.status != *q.status)) {
        continue;
      }
      runs.push_back(run);
    }
    std::sort(runs.begin(), runs.end(), [](const RunRecord& a, const RunRecord& b) {
      return std::tie(b.started_at, b.id) < std::tie(a.started_at, a.id);
    });
    if (runs.size() > static_cast<size_t>(q.limit)) runs.resize(static_cast<size_t>(q.limit));
    return runs;
  }
  std::vector<std::string> run_ids_with_prefix(const std::string& prefix, int limit) override {
    std::vector<std::string> ids;
    for (const auto& [id, run] : data().runs) {
      if (id.starts_with(prefix) && ids.size() < static_cast<size_t>(limit)) ids.push_back(id);
    }
    return ids;
  }
  std::pair<std::string, std::string> neighbour_run_ids(const std::string& id) override {
    std::pair<std::string, std::string> around;
    auto at = data().runs.lower_bound(id);
    if (at != data().runs.begin()) around.first = std::prev(at)->first;
    auto above = data().runs.upper_bound(id);
    if (above != data().runs.end()) around.second = above->first;
    return around;
  }
  std::vector<RunRecord> runs_of_job(const std::string& job_key) override {
    std::vector<RunRecord> runs;
    for (const auto& [id, run] : data().runs) {
      if (run.job_key == job_key) runs.push_back(run);
    }
    return runs;
  }
  std::int64_t count_unfinished(const Scope& scope, DayRange days) override {
    return static_cast<std::int64_t>(select([&](const RunRecord& run) {
                                       return in_scope(run, scope) && run.day >= days.first_day &&
                                              run.day <= days.last_day;
                                     }).size());
  }

  Money overrun(const Scope& scope, DayRange days) override {
    Money sum;
    for (const auto& [id, run] : data().runs) {
      if (run.overrun && in_scope(run, scope) && run.day >= days.first_day &&
          run.day <= days.last_day) {
        sum += run.spend - run.ceiling;
      }
    }
    return sum;
  }

  std::optional<BudgetRule> budget_rule(const Scope& scope) override {
    auto found = data().rules.find(scope);
    if (found == data().rules.end()) return std::nullopt;
    return found->second;
  }
  std::vector<BudgetRule> budget_rules() override {
    std::vector<BudgetRule> rules;
    for (auto it = data().rules.rbegin(); it != data().rules.rend(); ++it) {
      rules.push_back(it->second);  // backwards: the ledger must sort them itself
    }
    return rules;
  }
  void put_budget_rule(const BudgetRule& rule) override { data().rules[rule.scope] = rule; }
  void remove_budget_rule(const Scope& scope) override { data().rules.erase(scope); }

  Usage usage(const Scope& scope, DayRange days) override {
    Usage sum;
    for (auto it = data().usage.lower_bound({scope, days.first_day});
         it != data().usage.end() && it->first.first == scope && it->first.second <= days.last_day;
         ++it) {
      sum.spent += it->second.spent;
      sum.held += it->second.held;
      sum.live += it->second.live;
    }
    return sum;
  }
  void add_usage(const std::vector<Scope>& scopes, std::int64_t day, const Usage& delta) override {
    for (const Scope& scope : scopes) {
      Usage& row = data().usage[{scope, day}];
      row.spent += delta.spent;
      row.held += delta.held;
      row.live += delta.live;
    }
  }

  std::optional<StopOrder> first_stop_order(const std::vector<Scope>& scopes) override {
    for (const auto& [order, cleared] : data().stop_orders) {
      if (cleared) continue;
      for (const Scope& scope : scopes) {
        if (order.scope == scope) return order;
      }
    }
    return std::nullopt;
  }
  bool insert_warning(const Scope& scope, std::int64_t period_day, int percent,
                      const std::string& run_id, double) override {
    return data().warnings.emplace(std::make_tuple(scope, period_day, percent), run_id).second;
  }
  StopOrder insert_stop_order(const Scope& scope, const std::string& reason,
                              const std::string& placed_by, double placed_at) override {
    StopOrder order{static_cast<std::int64_t>(data().stop_orders.size()) + 1, scope, reason,
                    placed_by, placed_at};
    data().stop_orders.push_back({order, false});
    return order;
  }
  int clear_stop_orders(const Scope& scope, double) override {
    int cleared_now = 0;
    for (auto& [order, cleared] : data().stop_orders) {
      if (!cleared && order.scope == scope) {
        cleared = true;
        ++cleared_now;
      }
    }
    return cleared_now;
  }
  std::vector<StopOrder> active_stop_orders() override {
    std::vector<StopOrder> orders;
    for (const auto& [order, cleared] : data().stop_orders) {
      if (!cleared) orders.push_back(order);
    }
    return orders;
  }

  // Unfinished runs that `keep`.
  template <class Keep>
  std::vector<RunRecord> select(Keep keep) {
    std::vector<RunRecord> runs;
    for (const auto& [id, run] : data().runs) {
      if (run.status == RunStatus::running && keep(run)) runs.push_back(run);
    }
    return runs;
  }

  std::shared_ptr<FakeLedgerState> state_;
  std::function<double()> clock_;
};

}  // namespace spendcap::testing
