#include "spendcap/cli/runs.hpp"

#include <CLI/CLI.hpp>
#include <memory>

#include "spendcap/cli/command_tree.hpp"
#include "spendcap/cli/verbs.hpp"

#include <sys/ioctl.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>

#include "spendcap/base/error.hpp"
#include "spendcap/base/json_numbers.hpp"
#include "spendcap/base/json_text.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/cli/report_commands.hpp"
#include "spendcap/ledger/grant_rule.hpp"
#include "spendcap/ledger/ledger.hpp"
#include "spendcap/report/report.hpp"

namespace spendcap {

namespace {

double now_seconds() {
  timeval tv{};
  ::gettimeofday(&tv, nullptr);
  return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6;
}

double duration_seconds(const RunView& run, double now) {
  if (run.finished_at) return std::max(0.0, *run.finished_at - run.started_at);
  return std::max(0.0, now - run.started_at);
}

std::string duration_text(double seconds) {
  return format_duration(std::chrono::seconds(static_cast<std::int64_t>(std::llround(seconds))));
}

// A cell's width on the terminal: its code points (names are printable; wide glyphs are rare).
size_t shown_width(std::string_view text) {
  size_t points = 0;
  for (unsigned char c : text) points += (c & 0xC0) != 0x80;
  return points;
}

// `text` in at most `width` code points: a longer one cut to width - 1 and "~".
std::string cut_to(const std::string& text, size_t width) {
  if (shown_width(text) <= width) return text;
  std::string out;
  size_t points = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    bool starts = (c & 0xC0) != 0x80;
    if (starts && points + 1 >= width) break;
    points += starts;
    out += text[i];
  }
  return out + "~";
}

// Seconds to the millisecond, the same number in csv and json.
double rounded_ms(double seconds) {
  return std::round(seconds * 1000) / 1000;
}

}  // namespace

ShownBudget run_budget_of(const RunView& run, const std::vector<BudgetRule>& rules) {
  // Recorded at admission (schema v19): what it was then, whatever the budgets are now.
  if (!run.budget_source.empty()) {
    ShownBudget recorded{run.run_budget, run.budget_source, true};
    if (!run.run_budget) recorded.source = "";  // no budget of its own: `runs` says "-"
    return recorded;
  }
  // A run recorded before: as admission does (grant_rule.hpp): the smallest max_run of the run's
  // scopes lowers --budget, or is the run's budget without one.
  std::vector<BudgetRule> own;
  for (const BudgetRule& rule : rules) {
    if (in_scope(run, rule.scope)) own.push_back(rule);
  }
  RunBudget effective = effective_run_budget(run.budget, own);
  ShownBudget out;
  out.amount = effective.amount;
  if (effective.lowered_by) {
    out.source = "max_run of " + to_string(*effective.lowered_by);
  } else if (effective.amount) {
    out.source = "flag --budget";
  }
  return out;
}

std::string iso_time(double unix_seconds) {
  return rfc3339_utc(unix_seconds);
}

TableCell TableCell::money(Money amount, std::string_view currency) {
  TableCell cell;
  cell.parts_.front() = {{}, amount, std::string(currency)};
  return cell;
}

TableCell& TableCell::operator+=(const TableCell& more) {
  parts_.insert(parts_.end(), more.parts_.begin(), more.parts_.end());
  return *this;
}

void TableCell::add_amounts_to(MoneyColumn& column) const {
  for (const Part& part : parts_) {
    if (part.amount) column.add(*part.amount);
  }
}

std::string TableCell::text(const MoneyColumn& column) const {
  std::string out;
  for (const Part& part : parts_) {
    out += part.amount ? column.text(*part.amount, part.currency) : part.text;
  }
  return out;
}

int terminal_width() {
  winsize ws{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* columns = std::getenv("COLUMNS")) {
    int n = std::atoi(columns);
    if (n > 20 && n < 10000) return n;
  }
  return 0;
}

void print_table(const std::vector<std::vector<TableCell>>& rows, int width,
                 const std::vector<std::size_t>& cut) {
  std::vector<MoneyColumn> columns;
  for (const auto& row : rows) {
    columns.resize(std::max(columns.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) row[i].add_amounts_to(columns[i]);
  }
  std::vector<std::vector<std::string>> texts;
  std::vector<size_t> widths(columns.size());
  for (const auto& row : rows) {
    std::vector<std::string>& text = texts.emplace_back();
    for (size_t i = 0; i < row.size(); ++i) {
      text.push_back(escape_for_terminal(row[i].text(columns[i])));
      widths[i] = std::max(widths[i], shown_width(text.back()));
    }
  }
  // Fitted to the width: one character off the widest cuttable column at a time, none narrower
  // than its header (the first row) or kMinCutColumn.
  if (width > 0 && !widths.empty()) {
    size_t total = 2 * (widths.size() - 1);
    for (size_t w : widths) total += w;
    auto narrowest = [&](size_t column) {
      size_t header = column < texts.front().size() ? shown_width(texts.front()[column]) : 0;
      return std::max(kMinCutColumn, header);
    };
    while (total > static_cast<size_t>(width)) {
      size_t* widest = nullptr;
      for (size_t column : cut) {
        if (column < widths.size() && widths[column] > narrowest(column) &&
            (!widest || widths[column] > *widest)) {
          widest = &widths[column];
        }
      }
      if (!widest) break;  // as narrow as it goes: the rest runs over
      --*widest;
      --total;
    }
  }
  for (const auto& row : texts) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      std::string cell = cut_to(row[i], widths[i]);
      size_t shown = shown_width(cell);
      line += cell;
      if (i + 1 < row.size()) line += std::string(widths[i] - shown + 2, ' ');
    }
    std::cout << line << "\n";
  }
}

std::string resolve_run_id(Ledger& ledger, const std::string& prefix, const std::string& what) {
  if (prefix.empty()) throw Error(what, "an empty run id", "give the id `spendcap runs` shows");
  // Eleven are fetched so that "matches more than 10" can be said without listing thousands.
  std::vector<std::string> ids = ledger.run_ids_with_prefix(prefix, 11);
  if (ids.size() == 1) return ids.front();
  if (ids.empty()) {
    throw Error(what, "no such run in " + ledger.url() + " (no run id starts with this)",
                "see `spendcap runs` for the runs' ids");
  }
  Error error(what,
              "matches " +
                  std::string(ids.size() > 10 ? "more than 10" : std::to_string(ids.size())) +
                  " runs",
              "give more of the id");
  if (ids.size() > 10) ids.resize(10);
  error.details = ids;
  throw error;
}

int runs_command(const RunsRequest& request) {
  if (request.format != "table" && request.format != "csv" && request.format != "json") {
    throw Error("--format " + request.format, "not a format of `runs`", "table, csv or json");
  }
  bool json = request.json || request.format == "json";
  if (request.limit <= 0) {
    throw Error("--limit " + std::to_string(request.limit), "must be at least 1",
                "e.g. --limit 20");
  }
  RunQuery query;
  if (request.since) query.since = parse_report_time(*request.since, "--since", false);
  if (request.until) query.until = parse_report_time(*request.until, "--until", true);
  if (query.until <= query.since) throw Error("--until", "is not after --since");
  query.team = request.team;
  query.experiment = request.experiment;
  query.user = request.user;
  if (request.status) {
    query.status = parse_run_status(*request.status);
    if (!query.status) {
      throw Error("--status " + *request.status, "not a run status",
                  "running, succeeded, failed, killed, refused, lost or preempted");
    }
  }
  // One more than asked: whether there were more is said below the table.
  query.limit =
      request.limit == std::numeric_limits<int>::max() ? request.limit : request.limit + 1;
  LedgerSession session = open_ledger_session(for_reading(request.choice));
  std::unique_ptr<Ledger>& ledger = session.ledger;
  const std::string& currency = session.currency;
  std::vector<ListedRun> listed = ledger->list_runs(query);
  std::vector<BudgetRule> rules = ledger->budget_rules();
  bool more = listed.size() > static_cast<size_t>(request.limit);
  if (more) listed.resize(static_cast<size_t>(request.limit));
  double now = now_seconds();

  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const ListedRun& l : listed) {
      const RunView& r = l.run;
      out.push_back(
          {{"id", r.id},
           {"short_id", r.id.substr(0, l.unique_prefix)},
           {"user", r.user},
           {"team", r.team},
           {"experiment", r.experiment},
           {"project", r.project},
           {"host", r.host},
           {"status", to_string(r.status)},
           {"reason", r.reason},
           {"exit_code", spendcap_exit_of(r) ? nlohmann::json(*spendcap_exit_of(r)) : nullptr},
           {"command_exit_code", r.exit_code ? nlohmann::json(*r.exit_code) : nullptr},
           {"started_at", rfc3339_utc(r.started_at)},
           {"finished_at", r.finished_at ? nlohmann::json(rfc3339_utc(*r.finished_at)) : nullptr},
           {"duration_seconds", rounded_ms(duration_seconds(r, now))},
           {"spend", money_to_json(r.spend)},
           {"budget", run_budget_of(r, rules).amount
                          ? nlohmann::json(money_to_json(*run_budget_of(r, rules).amount))
                          : nullptr},
           {"budget_source", run_budget_of(r, rules).source.empty()
                                 ? nlohmann::json()
                                 : nlohmann::json(run_budget_of(r, rules).source)},
           {"currency", currency}});
    }
    std::cout << plain_json_numbers(dump_json(out, 2)) << "\n";
    return 0;
  }
  std::vector<std::vector<TableCell>> rows = {{"RUN", "USER", "TEAM", "EXPERIMENT", "STATUS",
                                               "REASON", "EXIT", "CMD EXIT", "STARTED (UTC)",
                                               "DURATION", "SPEND", "BUDGET"}};
  for (const ListedRun& l : listed) {
    const RunView& r = l.run;
    std::optional<Money> budget = run_budget_of(r, rules).amount;
    std::string source = run_budget_of(r, rules).source;
    rows.push_back({r.id.substr(0, l.unique_prefix), r.user.empty() ? "-" : r.user,
                    r.team.empty() ? "-" : r.team, r.experiment.empty() ? "-" : r.experiment,
                    to_string(r.status), r.reason.empty() ? "-" : r.reason,
                    spendcap_exit_of(r) ? std::to_string(*spendcap_exit_of(r)) : "-",
                    r.exit_code ? std::to_string(*r.exit_code) : "-",
                    format_utc(r.started_at, UtcForm::clock),
                    duration_text(duration_seconds(r, now)), TableCell::money(r.spend, currency),
                    // A policy's max_run says so; a plain amount is the run's --budget.
                    !budget ? TableCell("-")
                    : source == "flag --budget" || source.empty()
                        ? TableCell::money(*budget, currency)
                        : TableCell::money(*budget, currency) + " (" + source + ")"});
  }
  if (request.format == "csv") {
    // Plain numbers for a spreadsheet; every cell through report's csv_field, the one place that
    // quotes (and defuses) a csv cell.
    std::cout << "id,short_id,user,team,experiment,status,reason,exit_code,command_exit_code,"
                 "started_at,finished_at,"
                 "duration_seconds,spend,budget,budget_source,currency\n";
    for (const ListedRun& l : listed) {
      const RunView& r = l.run;
      char duration[32];
      std::snprintf(duration, sizeof duration, "%.3f", rounded_ms(duration_seconds(r, now)));
      std::optional<Money> budget = run_budget_of(r, rules).amount;
      std::vector<std::string> cells = {
          r.id,
          r.id.substr(0, l.unique_prefix),
          r.user,
          r.team,
          r.experiment,
          to_string(r.status),
          r.reason,
          spendcap_exit_of(r) ? std::to_string(*spendcap_exit_of(r)) : "",
          r.exit_code ? std::to_string(*r.exit_code) : "",
          rfc3339_utc(r.started_at),
          r.finished_at ? rfc3339_utc(*r.finished_at) : "",
          duration,
          to_decimal(r.spend),
          budget ? to_decimal(*budget) : "",
          run_budget_of(r, rules).source,
          currency};
      std::string line;
      for (size_t i = 0; i < cells.size(); ++i) line += (i ? "," : "") + csv_field(cells[i]);
      std::cout << line << "\n";
    }
    return 0;
  }
  if (listed.empty()) {
    std::cout << "no runs in " << ledger->url() << " match\n";
    return 0;
  }
  print_table(rows);
  if (more) {
    std::cout << "(the newest " << request.limit << " shown; --limit N for more, --since DATE to "
              << "go back)\n";
  }
  return 0;
}

namespace {

VerbRun add_runs(CLI::App& command, CLI::App&, VerbContext&) {
  auto request = std::make_shared<RunsRequest>();
  auto& r = *request;
  CLI::App* runs = &command;
  add_ledger_options(*runs, r.choice);
  runs->add_option("--since", r.since, "runs started from (2026-12-01, ...T10:00:00Z, 30d)");
  runs->add_option("--until", r.until, "runs started before (a date: through that day)");
  runs->add_option("--team", r.team, "only the team's runs");
  runs->add_option("--experiment", r.experiment, "only the experiment's runs");
  runs->add_option("--user", r.user, "only the user's runs");
  runs->add_option("--status", r.status,
                   "only runs with this status (running, succeeded, failed, killed, refused, "
                   "lost, preempted)");
  runs->add_option("--limit", r.limit, "at most this many, the newest (default 50)");
  runs->add_flag("--json", r.json, "print JSON");
  runs->add_option("--format", r.format, "table (default), csv or json");
  return [request] { return runs_command(*request); };
}

}  // namespace

const Verb kRunsVerb = {
    "runs", "run history, newest first, as sacct: finished and running runs, one row each",
    add_runs};

}  // namespace spendcap
