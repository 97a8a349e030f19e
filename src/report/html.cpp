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

}  // namespace

std::string report_html(const Report& report, const Report& by_day, const std::string& currency) {
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
  size_t colour = 0;
  // One series per group of the report, in the report's order (biggest first).
  for (const GroupTotals& g : report.groups) {
    std::string name = group_name(g.key);
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
           number(total, 6) + "\" fill=\"" + kPalette[colour++ % std::size(kPalette)] + "\">\n" +
           rects + "</g>\n";
  }
  int x = left + gap;
  for (const std::string& day : days) {
    svg += "<text x=\"" + std::to_string(x) + "\" y=\"" + std::to_string(top + height + 14) +
           "\" font-size=\"9\" transform=\"rotate(45 " + std::to_string(x) + " " +
           std::to_string(top + height + 14) + ")\">" + day.substr(5) + "</text>\n";
    x += bar + gap;
  }
  svg += "</svg>\n";

  std::string table = "<table id=\"report\">\n<thead><tr>";
  for (const GroupBy& by : report.by) table += "<th>" + escape_html(to_string(by)) + "</th>";
  if (report.by.empty()) table += "<th>all</th>";
  table +=
      "<th>runs</th><th>succeeded</th><th>failed</th><th>killed</th><th>refused</th><th>lost</th>"
      "<th>spend</th><th>waste</th><th>waste share</th><th>per "
      "accepted</th></tr></thead>\n<tbody>\n";
  auto row = [&](const GroupTotals& g, bool total) {
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
    cells += num(g.runs) + num(g.succeeded) + num(g.failed) + num(g.killed) + num(g.refused) +
             num(g.lost);
    cells += "<td class=\"n spend\">" + escape_html(number(g.spend.units(), 2) + " " + currency) +
             (g.running ? " *" : "") + "</td>";
    cells +=
        "<td class=\"n\">" + escape_html(number(g.waste.units(), 2) + " " + currency) + "</td>";
    cells += "<td class=\"n\">" + number(100 * g.waste_share(), 0) + "%</td>";
    auto per = g.cost_per_accepted();
    cells += "<td class=\"n\">" +
             (per ? escape_html(number(per->units(), 2) + " " + currency) : std::string()) +
             "</td>";
    return std::string(total ? "<tr class=\"total\"" : "<tr class=\"group\"") + " data-group=\"" +
           escape_html(name) + "\" data-spend=\"" + number(g.spend.units(), 6) + "\">" + cells +
           "</tr>\n";
  };
  for (const GroupTotals& g : report.groups) table += row(g, false);
  table += "</tbody>\n<tfoot>\n" + row(report.total, true) + "</tfoot>\n</table>\n";

  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
         "<title>spendcap report</title>\n<style>\n"
         "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
         "th,td{padding:2px 8px;border-bottom:1px solid #ddd;text-align:left}"
         "td.n{text-align:right;font-variant-numeric:tabular-nums}tr.total{font-weight:bold}\n"
         "</style>\n</head>\n<body>\n<h1>Spend per day</h1>\n" +
         svg + "<h1>By " +
         escape_html(report.by.empty() ? std::string("everything")
                                       : [&] {
                                           std::vector<std::string> b;
                                           for (const GroupBy& g : report.by) b.push_back(to_string(g));
                                           return join(b, ", ");
                                         }()) +
         "</h1>\n" + table +
         (report.total.running ? "<p>* includes the spend so far of runs still running</p>\n" : "") +
         "</body>\n</html>\n";
}

}  // namespace spendcap
