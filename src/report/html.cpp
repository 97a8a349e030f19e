// The html report (report.hpp): a page to share showback with people who will not run a CLI.
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "spendcap/base/text.hpp"
#include "spendcap/report/report.hpp"

namespace spendcap {

namespace {

std::string escape_html(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string number(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

std::string group_name(const std::vector<std::string>& key) {
  if (key.empty()) return "all";
  std::vector<std::string> parts;
  for (const std::string& k : key) parts.push_back(k.empty() ? "-" : k);
  return join(parts, " / ");
}

const char* const kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

// Whole cents (the currency's hundredths) of each amount, rounded so that they add up to the
// rounded total: each is floored, and the cents left over go to the largest remainders (ties: the
// earlier amount). A page of 0.424 + 0.204 + 0.114 prints 0.43 + 0.20 + 0.11 = 0.74, never a total
// the rows do not add up to.
std::vector<std::int64_t> largest_remainder_cents(const std::vector<Money>& amounts, Money total) {
  constexpr std::int64_t kMicrosPerCent = 10'000;
  auto rounded = [](std::int64_t micros) {
    return micros >= 0 ? (micros + kMicrosPerCent / 2) / kMicrosPerCent
                       : -((-micros + kMicrosPerCent / 2) / kMicrosPerCent);
  };
  std::vector<std::int64_t> cents(amounts.size());
  std::vector<std::pair<std::int64_t, size_t>> remainders;
  std::int64_t floored = 0;
  for (size_t i = 0; i < amounts.size(); ++i) {
    std::int64_t micros = amounts[i].micros;
    std::int64_t whole = micros / kMicrosPerCent;
    if (micros % kMicrosPerCent < 0) --whole;  // floor for negatives
    cents[i] = whole;
    floored += whole;
    remainders.push_back({micros - whole * kMicrosPerCent, i});
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::int64_t left = rounded(total.micros) - floored;
  for (size_t k = 0; left > 0 && k < remainders.size(); ++k, --left) ++cents[remainders[k].second];
  return cents;
}

std::string cents_text(std::int64_t cents, const std::string& currency) {
  char text[64];
  std::snprintf(text, sizeof text, "%s%lld.%02lld", cents < 0 ? "-" : "",
                static_cast<long long>(std::llabs(cents) / 100),
                static_cast<long long>(std::llabs(cents) % 100));
  return std::string(text) + " " + currency;
}

}  // namespace

std::string report_period_text(const Report& report, const HtmlContext& context) {
  std::string from, to;
  if (context.since) from = format_utc(*context.since, UtcForm::date);
  if (context.until)
    to = format_utc(*context.until - 1, UtcForm::date);  // [since, until): its last day
  if (from.empty() && report.total.runs > 0)
    from = format_utc(report.total.started_first, UtcForm::date);
  if (to.empty() && report.total.runs > 0)
    to = format_utc(report.total.started_last, UtcForm::date);
  if (from.empty() && to.empty()) return "no runs";
  if (from.empty()) return "until " + to;
  if (to.empty()) return "from " + from;
  return from == to ? from : from + " to " + to;
}

std::string report_html(const Report& report, const Report& by_day, const HtmlContext& context) {
  const std::string& currency = context.currency;
  const std::string period = report_period_text(report, context);
  // Days in order, and each group's spend per day.
  std::set<std::string> days;
  std::map<std::string, std::map<std::string, double>> spend;  // group -> day -> spend
  for (const GroupTotals& g : by_day.groups) {
    if (g.key.empty()) continue;
    std::vector<std::string> rest(g.key.begin() + 1, g.key.end());
    days.insert(g.key[0]);
    spend[group_name(rest)][g.key[0]] += g.spend.units();
  }
  std::map<std::string, double> day_total;
  for (const auto& [group, per_day] : spend) {
    for (const auto& [day, amount] : per_day) day_total[day] += amount;
  }
  double tallest = 0;
  for (const auto& [day, amount] : day_total) tallest = std::max(tallest, amount);

  const int bar = 24, gap = 8, height = 240, left = 60, top = 20;
  const int width = left + static_cast<int>(days.size()) * (bar + gap) + 20;
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                    std::to_string(std::max(width, 200)) + "\" height=\"" +
                    std::to_string(height + top + 60) +
                    "\" role=\"img\" aria-label=\"spend per day\">\n";
  svg += "<line x1=\"" + std::to_string(left) + "\" y1=\"" + std::to_string(top + height) +
         "\" x2=\"" + std::to_string(width) + "\" y2=\"" + std::to_string(top + height) +
         "\" stroke=\"#333\"/>\n";
  svg += "<text x=\"4\" y=\"" + std::to_string(top + 10) + "\" font-size=\"11\">" +
         escape_html(number(tallest, 2) + " " + currency) + "</text>\n";
  std::map<std::string, double> stacked;  // day -> height so far
  std::string legend = "<ul class=\"legend\">\n";
  size_t colour = 0;
  // One series per group of the report, in the report's order (biggest first).
  for (const GroupTotals& g : report.groups) {
    std::string name = group_name(g.key);
    const char* fill = kPalette[colour++ % std::size(kPalette)];
    auto it = spend.find(name);
    double total = 0;
    std::string rects;
    int x = left + gap;
    for (const std::string& day : days) {
      double amount = 0;
      if (it != spend.end()) {
        auto d = it->second.find(day);
        if (d != it->second.end()) amount = d->second;
      }
      total += amount;
      if (amount > 0 && tallest > 0) {
        double h = amount / tallest * height;
        double y = top + height - stacked[day] - h;
        stacked[day] += h;
        rects += "  <rect x=\"" + std::to_string(x) + "\" y=\"" + number(y, 2) + "\" width=\"" +
                 std::to_string(bar) + "\" height=\"" + number(h, 2) + "\" data-day=\"" + day +
                 "\" data-spend=\"" + number(amount, 6) + "\"><title>" +
                 escape_html(name + ", " + day + ": " + number(amount, 2) + " " + currency) +
                 "</title></rect>\n";
      }
      x += bar + gap;
    }
    svg += "<g class=\"series\" data-group=\"" + escape_html(name) + "\" data-total=\"" +
           number(total, 6) + "\" fill=\"" + fill + "\">\n" + rects + "</g>\n";
    legend += "<li class=\"legend-item\" data-group=\"" + escape_html(name) + "\" data-colour=\"" +
              fill + "\"><span class=\"swatch\" style=\"background:" + fill + "\"></span>" +
              escape_html(name) + (g.running ? " *" : "") + "</li>\n";
  }
  legend += "</ul>\n";
  int x = left + gap;
  for (const std::string& day : days) {
    svg += "<text x=\"" + std::to_string(x) + "\" y=\"" + std::to_string(top + height + 14) +
           "\" font-size=\"9\" transform=\"rotate(45 " + std::to_string(x) + " " +
           std::to_string(top + height + 14) + ")\">" + day.substr(5) + "</text>\n";
    x += bar + gap;
  }
  svg += "</svg>\n";

  // The printed amounts: whole cents that add up to the printed totals (largest remainder).
  std::vector<Money> spends, wastes;
  for (const GroupTotals& g : report.groups) {
    spends.push_back(g.spend);
    wastes.push_back(g.waste);
  }
  std::vector<std::int64_t> spend_cents = largest_remainder_cents(spends, report.total.spend);
  std::vector<std::int64_t> waste_cents = largest_remainder_cents(wastes, report.total.waste);
  const std::int64_t total_spend_cents =
      largest_remainder_cents({report.total.spend}, report.total.spend)[0];
  const std::int64_t total_waste_cents =
      largest_remainder_cents({report.total.waste}, report.total.waste)[0];
  // "per accepted" only where the period has accepted results; a group without one says so.
  const bool any_accepted = report.total.accepted > 0;

  std::string table = "<table id=\"report\">\n<thead><tr>";
  for (const GroupBy& by : report.by) table += "<th>" + escape_html(to_string(by)) + "</th>";
  if (report.by.empty()) table += "<th>all</th>";
  table +=
      "<th>runs</th><th>running</th><th>succeeded</th><th>failed</th><th>killed</th>"
      "<th>refused</th><th>lost</th><th>preempted</th><th>spend</th><th>waste</th>"
      "<th>waste share</th>";
  if (any_accepted) table += "<th>accepted</th><th>per accepted</th>";
  table += "</tr></thead>\n<tbody>\n";
  auto row = [&](const GroupTotals& g, bool total, std::int64_t spend_c, std::int64_t waste_c) {
    std::string cells;
    std::string name = total ? "total" : group_name(g.key);
    if (total) {
      cells += "<th colspan=\"" + std::to_string(std::max<size_t>(report.by.size(), 1)) +
               "\">total</th>";
    } else if (g.key.empty()) {
      cells += "<td>all</td>";
    } else {
      for (const std::string& k : g.key)
        cells += "<td>" + escape_html(k.empty() ? "-" : k) + "</td>";
    }
    auto num = [](auto v) { return "<td class=\"n\">" + std::to_string(v) + "</td>"; };
    cells += num(g.runs) + "<td class=\"n running\">" + std::to_string(g.running) + "</td>" +
             num(g.succeeded) + num(g.failed) + num(g.killed) + num(g.refused) + num(g.lost) +
             num(g.preempted);
    cells += "<td class=\"n spend\">" + escape_html(cents_text(spend_c, currency)) +
             (g.running ? " *" : "") + "</td>";
    cells += "<td class=\"n\">" + escape_html(cents_text(waste_c, currency)) + "</td>";
    cells += "<td class=\"n\">" + number(100 * g.waste_share(), 0) + "%</td>";
    if (any_accepted) {
      auto per = g.cost_per_accepted();
      cells += num(g.accepted) + "<td class=\"n per-accepted\">" +
               (per ? escape_html(number(per->units(), 2) + " " + currency)
                    : std::string("none accepted")) +
               "</td>";
    }
    return std::string(total ? "<tr class=\"total\"" : "<tr class=\"group\"") + " data-group=\"" +
           escape_html(name) + "\" data-spend=\"" + number(g.spend.units(), 6) +
           "\" data-running=\"" + std::to_string(g.running) + "\">" + cells + "</tr>\n";
  };
  for (size_t i = 0; i < report.groups.size(); ++i) {
    table += row(report.groups[i], false, spend_cents[i], waste_cents[i]);
  }
  table += "</tbody>\n<tfoot>\n" + row(report.total, true, total_spend_cents, total_waste_cents) +
           "</tfoot>\n</table>\n";

  // Budget against actual, per team: the ledger's team budgets in their current period, beside
  // what the team's runs spent in this report's period.
  std::string budgets;
  if (!context.team_budgets.empty()) {
    budgets =
        "<h2>Budget against actual, per team</h2>\n<table id=\"budgets\">\n<thead><tr><th>team"
        "</th><th>budget</th><th>period</th><th>spent this period</th><th>remaining</th>"
        "<th>used</th><th>in this report</th></tr></thead>\n<tbody>\n";
    for (const BudgetView& b : context.team_budgets) {
      Money actual = b.spent + b.live;
      double used = b.rule.amount.micros > 0 ? static_cast<double>(actual.micros) /
                                                   static_cast<double>(b.rule.amount.micros)
                                             : 0;
      auto in_report = context.team_spend.find(b.rule.scope.name);
      Money reported = in_report == context.team_spend.end() ? Money{} : in_report->second;
      std::string period_text = to_string(b.rule.period);
      if (b.period_start > 0) period_text += " from " + format_utc(b.period_start, UtcForm::date);
      auto money = [&](Money m) { return escape_html(number(m.units(), 2) + " " + currency); };
      budgets += "<tr class=\"budget\" data-team=\"" + escape_html(b.rule.scope.name) +
                 "\" data-budget=\"" + number(b.rule.amount.units(), 6) + "\" data-spent=\"" +
                 number(actual.units(), 6) + "\"" + (used > 1 ? " data-over=\"true\"" : "") +
                 "><td>" + escape_html(b.rule.scope.name) + "</td><td class=\"n\">" +
                 money(b.rule.amount) + "</td><td>" + escape_html(period_text) +
                 "</td><td class=\"n\">" + money(actual) + "</td><td class=\"n\">" +
                 money(b.remaining()) + "</td><td class=\"n" + (used > 1 ? " over" : "") + "\">" +
                 number(100 * used, 0) + "%</td><td class=\"n\">" + money(reported) +
                 "</td></tr>\n";
    }
    budgets += "</tbody>\n</table>\n";
  }

  std::string by_text = "everything";
  if (!report.by.empty()) {
    std::vector<std::string> b;
    for (const GroupBy& g : report.by) b.push_back(to_string(g));
    by_text = join(b, ", ");
  }
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
         escape_html("spendcap showback, " + period) +
         "</title>\n<style>\n"
         "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
         "th,td{padding:2px 8px;border-bottom:1px solid #ddd;text-align:left}"
         "td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}"
         "tr.total{font-weight:bold}"
         "ul.legend{list-style:none;padding:0;display:flex;flex-wrap:wrap;gap:4px 16px}"
         ".swatch{display:inline-block;width:12px;height:12px;margin-right:6px;"
         "vertical-align:middle}td.over{color:#b00;font-weight:bold}p.note{color:#555}\n"
         "</style>\n</head>\n<body>\n<header><h1 id=\"period\">spendcap showback: " +
         escape_html(period) + "</h1>\n<p>Runs that started " + escape_html(period) +
         " (UTC), by " + escape_html(by_text) + ", in " + escape_html(currency) +
         ".</p></header>\n<h2>Spend per day</h2>\n" + svg + legend + "<h2>By " +
         escape_html(by_text) + "</h2>\n" + table +
         "<p class=\"note\">Amounts are rounded to cents by the largest-remainder method, so the "
         "printed rows add up to the printed total.</p>\n" +
         (report.total.running
              ? "<p class=\"note\">* running: includes the spend so far of runs still running</p>\n"
              : "") +
         budgets + "</body>\n</html>\n";
}

}  // namespace spendcap
