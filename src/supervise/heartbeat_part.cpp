#include "spendcap/supervise/heartbeat_part.hpp"

#include <algorithm>
#include <boost/asio/post.hpp>

#include "spendcap/base/error.hpp"
#include "spendcap/ledger/async_ledger.hpp"
#include "spendcap/spend/meter.hpp"
#include "spendcap/supervise/reporter.hpp"
#include "spendcap/supervise/threshold_part.hpp"

namespace asio = boost::asio;

namespace spendcap {

namespace {
constexpr const char* kNodePrefix = "node ";
}

HeartbeatPart::HeartbeatPart(asio::io_context& io, const Reporter& reporter, const Meter& meter,
                             const RunTerms& terms, const HeartbeatPlan& plan, Money reserve,
                             std::shared_ptr<Ledger> ledger, Notifier& notifier, Hooks hooks)
    : timer_(io),
      reporter_(reporter),
      meter_(meter),
      terms_(terms),
      plan_(plan),
      reserve_(reserve),
      notifier_(notifier),
      hooks_(std::move(hooks)) {
  apply(plan_.grant);
  if (ledger) {
    ledger_ = std::make_unique<AsyncLedger>(
        std::move(ledger), [&io](std::function<void()> done) { asio::post(io, done); });
  }
}

HeartbeatPart::~HeartbeatPart() = default;

void HeartbeatPart::on_finish() {
  finished_ = true;
  timer_.cancel();
}

void HeartbeatPart::arm() {
  if (!ledger_) return;
  // A limited grant asks again just before the run would trip on it (heartbeat_delay): what a
  // finished sibling released since the last heartbeat is then picked up in time.
  std::optional<Nanos> until_trip;
  if (binding_ && terms_.mode == Mode::enforce && !hooks_.tripped()) {
    Nanos until = time_to_cost(terms_.rate_per_hour, ceiling_ - reserve_ - meter_.spend_at(now()));
    if (until != Nanos::max()) until_trip = until;
  }
  timer_.expires_after(heartbeat_delay(plan_.sync, until_trip));
  timer_.async_wait([this](auto error) {
    if (error || finished_) return;
    heartbeat();
    arm();
  });
}

void HeartbeatPart::heartbeat_now() {
  if (!ledger_) return;
  asio::post(timer_.get_executor(), [this] {
    if (!finished_) heartbeat();
  });
}

void HeartbeatPart::heartbeat() {
  if (in_flight_) return;  // a slow ledger: the trip timer guards the ceiling
  in_flight_ = true;
  Money spend = meter_.spend_at(now());
  Money claim = claim_ahead(terms_.rate_per_hour, plan_.claim_horizon, plan_.sync, reserve_);
  // A heartbeat asks for more only when what its ceiling has left ahead of the spend falls
  // below its reserve plus half a claim (and never below two syncs of burn): most heartbeats then
  // raise nothing, and the ledger writes only the run's own row (issue 23: a hot team budget's
  // rows are written once per half claim, not at every heartbeat). A limited grant asks every
  // time (other runs may have released some), and warn mode keeps asking as before.
  Money keep = reserve_ + std::max(Money{(claim - reserve_).micros / 2},
                                   cost_of(terms_.rate_per_hour, 2 * plan_.sync));
  bool raise = binding_ || terms_.mode != Mode::enforce || ceiling_ - spend < keep;
  Money want = raise ? spend + claim : ceiling_;
  // Once tripped the run only shuts down, within the ceiling it holds: it asks for nothing more,
  // leaving the rest of the budget to other runs.
  if (hooks_.tripped()) want = ceiling_;
  auto grant = std::make_shared<Grant>();
  std::string id = terms_.run_id;
  std::optional<LiveProgress> live = hooks_.progress ? hooks_.progress() : std::nullopt;
  if (live == progress_sent_) live.reset();  // the ledger has it: no write for it
  std::optional<HeartbeatProgress> progress;
  if (live) progress = live->at(now());
  ledger_->call(
      [id, spend, want, progress, grant, reported = reported_micros_](Ledger& ledger) {
        *grant = ledger.heartbeat(id, spend, want, progress);
        reported->store(spend.micros);
      },
      [this, grant, live](const std::string& error) {
        in_flight_ = false;
        if (error.empty() && live) progress_sent_ = live;
        on_heartbeat(error, *grant);
      });
}

void HeartbeatPart::on_heartbeat(const std::string& error, const Grant& grant) {
  if (finished_) return;
  if (!error.empty()) {
    if (!failing_) {
      reporter_.error("ledger unreachable (" + error + "); the run goes on within its ceiling " +
                      format_money(ceiling_, terms_.currency));
    }
    failing_ = true;
    return;
  }
  if (failing_) reporter_.line("ledger reachable again");
  failing_ = false;
  apply(grant);
  hooks_.ceiling_moved();
  for (const ScopeUse& use : grant.scopes) {
    // A run that is shutting down warns no more: a warning after the trip only confuses.
    if (!hooks_.warning()) break;
    auto& tracker =
        scope_thresholds_.try_emplace(to_string(use.scope), terms_.warn_at).first->second;
    std::vector<double> crossed = tracker.crossed(use.spent, use.amount);
    if (!crossed.empty()) {
      std::string line = spent_of(use.spent, use.amount,
                                  to_string(use.scope) + " budget (" + to_string(use.period) + ")",
                                  terms_.currency);
      reporter_.line(line);  // this run's user sees it in any case
      // The reason is the line up to its figures ("80% of the team:vision budget (month)
      // spent"), not up to the scope's own colon.
      std::string reason = line.substr(0, line.find(" spent: ") + std::string(" spent").size());
      RunEvent warning{"warning", reason, to_string(use.scope), line, meter_.spend_at(now())};
      warning.scope_spend = use.spent;
      warning.scope_budget = use.amount;
      announce(use, crossed, warning);
    }
  }
  hooks_.granted(grant);
}

// A shared budget's threshold is announced once per period, by whichever run crosses it first:
// the ledger decides (Ledger::claim_warning), so two runs of a team send one webhook for each
// threshold, not one each. A ledger that cannot be asked announces (better twice than never).
void HeartbeatPart::announce(const ScopeUse& use, const std::vector<double>& crossed,
                             RunEvent event) {
  if (!ledger_) {
    notifier_.notify(event);
    return;
  }
  std::vector<int> percents;
  for (double fraction : crossed) percents.push_back(static_cast<int>(fraction * 100 + 0.5));
  auto claimed = std::make_shared<bool>(true);
  std::string id = terms_.run_id;
  Scope scope = use.scope;
  Period period = use.period;
  ledger_->call(
      [scope, period, percents, id, claimed](Ledger& ledger) {
        *claimed = ledger.claim_warning(scope, period, percents, id);
      },
      [this, claimed, event](const std::string& error) {
        if (finished_) return;
        if (error.empty() && !*claimed) return;  // another run announced it
        notifier_.notify(event);
      });
}

void HeartbeatPart::apply(const Grant& grant) {
  ceiling_ = grant.ceiling;
  allowed_ = grant.allowed;
  binding_ = grant.binding;
  fair_share_ = grant.fair_share;
}

// A multi-node run stops as one: this node's own trip is placed as a stop order on the run (its
// nodes' job key), which every other node takes at its next heartbeat. A stop order is not
// placed again: it reached every node already.
std::string HeartbeatPart::tell_other_nodes(const Trip& trip) {
  if (plan_.multi_node_run_id.empty()) return "";
  if (trip.kind == TripKind::stop_order) return "";
  std::string first_trip = plan_.node + " (" + trip.reason + ")";
  if (!ledger_) return first_trip;
  Scope run{ScopeKind::job, plan_.multi_node_run_id};
  std::string reason = plan_.node + " tripped: " + trip.reason;
  std::string by = kNodePrefix + plan_.node;
  ledger_->call([run, reason, by](Ledger& ledger) { ledger.place_stop_order(run, reason, by); },
                [this](const std::string& error) {
                  if (!error.empty()) {
                    reporter_.error("ledger: the run's other nodes were not told to stop (" +
                                    error + "); they stop by their own trips");
                  }
                });
  return first_trip;
}

std::string HeartbeatPart::first_trip_of(const StopOrder& order) const {
  if (plan_.multi_node_run_id.empty() || order.scope.kind != ScopeKind::job ||
      order.scope.name != plan_.multi_node_run_id || !order.placed_by.starts_with(kNodePrefix)) {
    return "";
  }
  std::string node = order.placed_by.substr(std::string(kNodePrefix).size());
  std::string prefix = node + " tripped: ";
  std::string why =
      order.reason.starts_with(prefix) ? order.reason.substr(prefix.size()) : order.reason;
  return node + " (" + why + ")";
}

void HeartbeatPart::record_would_stop(const std::string& reason) {
  if (!ledger_) return;
  std::string id = terms_.run_id;
  ledger_->call([id, reason](Ledger& ledger) { ledger.record_would_stop(id, reason); },
                [this](const std::string& error) {
                  if (!error.empty()) reporter_.error("ledger: " + error);
                });
}

// The result is shared: a late answer after the wait writes into it, not into a dead frame.
std::vector<TeamBudget> HeartbeatPart::team_budgets(const std::string& team) {
  auto views = std::make_shared<std::vector<BudgetView>>();
  auto reported = std::make_shared<Money>();
  if (!ledger_ || team.empty()) return {};
  std::string error = ledger_->call_and_wait(
      [views, reported, from = reported_micros_](Ledger& ledger) {
        *views = ledger.budgets();
        *reported = Money{from->load()};  // after every heartbeat queued before
      },
      std::chrono::seconds(2));
  if (!error.empty()) return {};
  std::vector<TeamBudget> out;
  for (const BudgetView& view : *views) {
    if (view.rule.scope.kind != ScopeKind::team || view.rule.scope.name != team) continue;
    // This run is still unfinished in the ledger: its last reported spend is part of `live`
    // (unless it started in an earlier period), and its final spend is added by the caller.
    Money others_live = view.live - std::min(view.live, *reported);
    out.push_back(TeamBudget{to_string(view.rule.period), view.rule.amount, view.remaining(),
                             view.spent + others_live});
  }
  return out;
}

std::vector<TeamBudget> HeartbeatPart::team_usage(const Grant& grant, const std::string& team) {
  std::vector<TeamBudget> out;
  if (team.empty()) return out;
  for (const ScopeUse& use : grant.scopes) {
    if (use.scope.kind != ScopeKind::team || use.scope.name != team) continue;
    out.push_back(TeamBudget{to_string(use.period), use.amount, use.remaining(), use.spent});
  }
  return out;
}

std::string HeartbeatPart::record_final(const RunFinal& final, Nanos timeout,
                                        const std::vector<std::int64_t>& outbox_delivered) {
  if (!ledger_) return "no ledger";
  return ledger_->call_and_wait(
      [final, outbox_delivered](Ledger& ledger) {
        // Before the final row: the run's claims on them hold while it is running (issue 33).
        // One that fails is removed again after the final row (finish_run_notifier).
        for (std::int64_t id : outbox_delivered) {
          try {
            ledger.remove_outbox(id);
          } catch (const Error&) {
          }
        }
        ledger.finish_run(final);
      },
      timeout);
}

}  // namespace spendcap
