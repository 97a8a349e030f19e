// Writing a report (report.hpp): the csv cells, the table for a terminal, csv and json, and the
// cost per metric point's text. report.cpp builds the report these write.
#include "spendcap/report/report.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include "spendcap/base/json_text.hpp"
#include "spendcap/base/text.hpp"

namespace spendcap {
namespace {

// As printf's "%.*f" (exact, ties to even; the same text for 75 million values tried, money, exact
// ties, inf and nan among them), without its format parsing: a table of 100,000 groups has a
// million numbers. 400: a double's longest fixed text at 6 decimals is under 330 characters.
std::string fixed(double value, int decimals) {
  char text[400];
  char* end =
      std::to_chars(text, text + sizeof text, value, std::chars_format::fixed, decimals).ptr;
  return std::string(text, end);
}

// "4166.67" -> "4,166.67"
std::string with_thousands(const std::string& plain) {
  size_t start = plain[0] == '-' ? 1 : 0;
  size_t dot = plain.find('.');
  if (dot == std::string::npos) dot = plain.size();
  std::string out;
  out.reserve(plain.size() + (dot - start) / 3);
  out.append(plain, 0, start);
  for (size_t i = start; i < dot; ++i) {
    out += plain[i];
    size_t left = dot - i - 1;
    if (left > 0 && left % 3 == 0) out += ',';
  }
  out.append(plain, dot);
  return out;
}

}  // namespace

CostPerPoint cost_per_metric_point(Money spend, const Baseline& baseline,
                                   std::optional<double> best) {
  CostPerPoint result;
  result.best = best;
  if (!best) {
    result.text = "not measured";
    return result;
  }
  double improvement =
      baseline.goal == MetricGoal::max ? *best - baseline.value : baseline.value - *best;
  if (!(improvement > 0) || !std::isfinite(improvement)) {
    result.text = "undefined: no improvement";
    return result;
  }
  result.per_point = spend.units() / improvement;
  result.text = with_thousands(fixed(*result.per_point, 2));
  return result;
}

namespace {

// A plain decimal number ("-0.5", "+3", "1e-6"): a spreadsheet reads it as a number, never as a
// formula, so it is left as it is however it starts.
bool is_plain_number(std::string_view text) {
  size_t i = 0;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
  size_t digits = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i, ++digits;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    size_t exponent = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i, ++exponent;
    if (exponent == 0) return false;
  }
  return i == text.size();
}

}  // namespace

bool starts_a_formula(std::string_view text) {
  if (text.empty() || is_plain_number(text)) return false;
  return std::string_view("=+-@\t\r").find(text.front()) != std::string_view::npos;
}

std::string csv_line(const std::vector<std::string>& cells) {
  std::string out;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (i > 0) out += ',';
    out += cells[i];
  }
  return out + "\n";
}

std::string csv_field(std::string_view text, CsvCells cells) {
  // OWASP's CSV injection advice: a single quote before the cell, and the cell quoted, so that a
  // spreadsheet shows the text instead of evaluating it (quoting alone does not stop it).
  const bool neutralise = cells == CsvCells::safe && starts_a_formula(text);
  if (!neutralise && text.find_first_of(",\"\r\n") == std::string_view::npos) {
    return std::string(text);
  }
  std::string out = neutralise ? "\"'" : "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// ---- the outputs ----

namespace {

std::string opt_number(const std::optional<double>& value, int decimals) {
  return value ? fixed(*value, decimals) : std::string();
}

std::string_view key_text(const std::string& value) {
  return value.empty() ? std::string_view("-") : std::string_view(value);
}

// One column of the table and the csv: its header and how a group fills it.
struct Column {
  std::string header;
  bool money = false;  // right-aligned with the currency
  bool numeric = true;
  std::function<std::string(const GroupTotals&, bool table)> cell;
  // Shown only where some group measured it (the table); csv and json always carry it.
  std::function<bool(const GroupTotals&)> measured;
  // A money column's amount, which the table prints (all of a column's with the same decimals,
  // MoneyColumn) in place of `cell`; and what follows it there.
  std::function<std::optional<double>(const GroupTotals&)> amount = {};
  std::function<std::string(const GroupTotals&)> after = {};
};

std::vector<Column> columns() {
  // A money column's csv cell: the full number.
  auto money = [](auto get) {
    return [get](const GroupTotals& g, bool) -> std::string {
      std::optional<double> v = get(g);
      return v ? fixed(*v, 6) : std::string();
    };
  };
  auto number = [](auto get, int decimals) {
    return [get, decimals](const GroupTotals& g, bool) { return opt_number(get(g), decimals); };
  };
  auto count = [](std::int64_t GroupTotals::*field) {
    return [field](const GroupTotals& g, bool) { return std::to_string(g.*field); };
  };
  auto always = [](const GroupTotals&) { return true; };
  auto has = [](Measured GroupTotals::*field) {
    return [field](const GroupTotals& g) { return (g.*field).runs > 0; };
  };
  auto measured_sum = [](Measured GroupTotals::*field) {
    return [field](const GroupTotals& g) { return (g.*field).value(); };
  };
  std::vector<Column> c;
  c.push_back({"runs", false, true, count(&GroupTotals::runs), always});
  c.push_back({"running", false, true, count(&GroupTotals::running), always});
  c.push_back({"succeeded", false, true, count(&GroupTotals::succeeded), always});
  c.push_back({"failed", false, true, count(&GroupTotals::failed), always});
  c.push_back({"killed", false, true, count(&GroupTotals::killed), always});
  c.push_back({"refused", false, true, count(&GroupTotals::refused), always});
  c.push_back({"lost", false, true, count(&GroupTotals::lost), always});
  c.push_back({"preempted", false, true, count(&GroupTotals::preempted),
               [](const GroupTotals& g) { return g.preempted > 0; }});
  auto spend = [](const GroupTotals& g) { return std::optional(g.spend.units()); };
  c.push_back({"spend", true, true, money(spend), always, spend,
               [](const GroupTotals& g) { return g.running ? "*" : " "; }});
  auto running_spend = [](const GroupTotals& g) { return std::optional(g.running_spend.units()); };
  c.push_back({"running_spend", true, true, money(running_spend),
               [](const GroupTotals&) { return false; }, running_spend});
  auto waste = [](const GroupTotals& g) { return std::optional(g.waste.units()); };
  c.push_back({"waste", true, true, money(waste), always, waste});
  c.push_back({"waste_share", false, true,
               [](const GroupTotals& g, bool table) {
                 return table ? fixed(100 * g.waste_share(), 0) + "%" : fixed(g.waste_share(), 4);
               },
               always});
  c.push_back({"accepted", false, true, count(&GroupTotals::accepted),
               [](const GroupTotals& g) { return g.accepted > 0; }});
  auto per_accepted = [](const GroupTotals& g) -> std::optional<double> {
    auto m = g.cost_per_accepted();
    return m ? std::optional(m->units()) : std::nullopt;
  };
  c.push_back({"per_accepted", true, true, money(per_accepted),
               [](const GroupTotals& g) { return g.accepted > 0; }, per_accepted});
  c.push_back({"gpu_hours_allocated", false, true,
               number(measured_sum(&GroupTotals::gpu_hours_allocated), 2),
               has(&GroupTotals::gpu_hours_allocated)});
  c.push_back({"gpu_hours_busy", false, true, number(measured_sum(&GroupTotals::gpu_hours_busy), 2),
               has(&GroupTotals::gpu_hours_busy)});
  c.push_back({"utilisation", false, true,
               [](const GroupTotals& g, bool table) {
                 auto u = g.utilisation();
                 if (!u) return std::string();
                 return table ? fixed(100 * *u, 0) + "%" : fixed(*u, 4);
               },
               [](const GroupTotals& g) { return g.utilisation().has_value(); }});
  c.push_back({"idle_spend", true, true, money(measured_sum(&GroupTotals::idle_spend)),
               has(&GroupTotals::idle_spend), measured_sum(&GroupTotals::idle_spend)});
  c.push_back({"energy_kwh", false, true, number(measured_sum(&GroupTotals::energy_kwh), 3),
               has(&GroupTotals::energy_kwh)});
  c.push_back({"co2_kg", false, true, number(measured_sum(&GroupTotals::co2_kg), 3),
               has(&GroupTotals::co2_kg)});
  c.push_back({"metric", false, false,
               [](const GroupTotals& g, bool) { return g.metric_name.value_or(""); },
               [](const GroupTotals& g) { return g.per_point.has_value(); }});
  c.push_back({"best_metric", false, true,
               [](const GroupTotals& g, bool) {
                 return g.best_metric ? fixed(*g.best_metric, 6) : std::string();
               },
               [](const GroupTotals& g) { return g.per_point.has_value(); }});
  c.push_back({"cost_per_metric_point", false, false,
               [](const GroupTotals& g, bool table) {
                 if (!g.per_point) return std::string();
                 if (!table) {
                   return g.per_point->per_point ? fixed(*g.per_point->per_point, 6)
                                                 : g.per_point->text;
                 }
                 return g.per_point->text;
               },
               [](const GroupTotals& g) { return g.per_point.has_value(); }});
  c.push_back({"units", false, true, number(measured_sum(&GroupTotals::units), 0),
               has(&GroupTotals::units)});
  auto per_thousand = [](const GroupTotals& g) { return g.cost_per_thousand_units(); };
  c.push_back({"per_thousand_units", true, true, money(per_thousand), has(&GroupTotals::units),
               per_thousand});
  c.push_back({"egress_gb", false, true, number(measured_sum(&GroupTotals::egress_gb), 3),
               has(&GroupTotals::egress_gb)});
  c.push_back({"egress_spend", true, true, money(measured_sum(&GroupTotals::egress_spend)),
               has(&GroupTotals::egress_spend), measured_sum(&GroupTotals::egress_spend)});
  c.push_back({"storage_peak_gb", false, true,
               number(measured_sum(&GroupTotals::storage_peak_gb), 3),
               has(&GroupTotals::storage_peak_gb)});
  c.push_back({"storage_spend", true, true, money(measured_sum(&GroupTotals::storage_spend)),
               has(&GroupTotals::storage_spend), measured_sum(&GroupTotals::storage_spend)});
  return c;
}

// Appends `text` padded with spaces to `width` bytes: numbers on the left, text on the right.
void append_padded(std::string& out, std::string_view text, size_t width, bool numeric) {
  size_t pad = text.size() < width ? width - text.size() : 0;
  if (numeric) out.append(pad, ' ');
  out += text;
  if (!numeric) out.append(pad, ' ');
}

// Display width of UTF-8 text: code points (names are printable; wide glyphs are rare in them).
size_t display_width(std::string_view text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

// Appends a key in `width` code points, a longer one cut to width - 1 and "~", then the two spaces
// between columns.
void append_key(std::string& out, std::string_view text, size_t width) {
  size_t shown = display_width(text);
  if (shown <= width) {
    out += text;
  } else {
    shown = 0;
    size_t end = 0;
    for (; end < text.size(); ++end) {
      unsigned char c = static_cast<unsigned char>(text[end]);
      if ((c & 0xC0) != 0x80) {
        if (shown + 1 >= width) break;
        ++shown;
      }
    }
    out += text.substr(0, end);
    out += '~';
    ++shown;
  }
  out.append(width - shown + 2, ' ');
}

// The table's headers are short, so that it fits a terminal; csv and json keep the long names.
std::string table_header(const std::string& name) {
  static const std::map<std::string, std::string> short_names = {
      {"succeeded", "ok"},
      {"failed", "failed"},
      {"refused", "refused"},
      {"preempted", "preempt"},
      {"waste_share", "waste%"},
      {"per_accepted", "per accepted"},
      {"gpu_hours_allocated", "GPU-h"},
      {"gpu_hours_busy", "busy GPU-h"},
      {"utilisation", "util"},
      {"idle_spend", "idle"},
      {"energy_kwh", "kWh"},
      {"co2_kg", "CO2 kg"},
      {"best_metric", "best"},
      {"cost_per_metric_point", "per point"},
      {"per_thousand_units", "per 1k units"},
      {"egress_gb", "egress GB"},
      {"egress_spend", "egress"},
      {"storage_peak_gb", "peak GB"},
      {"storage_spend", "storage"},
  };
  auto it = short_names.find(name);
  return it == short_names.end() ? name : it->second;
}

}  // namespace

std::string report_table(const Report& report, const std::string& currency, int width) {
  std::string text;
  write_report_table(report, currency, width, [&text](std::string_view part) { text += part; });
  return text;
}

void write_report_table(const Report& report, const std::string& currency, int width,
                        const std::function<void(std::string_view)>& write) {
  std::vector<Column> all = columns();
  std::vector<const Column*> shown;
  std::vector<std::string> unmeasured;
  // Which columns some group measured: each group made once (ReportGroups), every column asked.
  std::vector<char> measured(all.size(), 0);
  size_t left = all.size();
  auto ask = [&](const GroupTotals& g) {
    for (size_t i = 0; i < all.size(); ++i) {
      if (!measured[i] && all[i].measured(g)) {
        measured[i] = 1;
        --left;
      }
    }
  };
  ask(report.total);
  for (auto it = report.groups.begin(); left > 0 && it != report.groups.end(); ++it) ask(*it);
  for (size_t c = 0; c < all.size(); ++c) {
    const Column& column = all[c];
    if (measured[c]) {
      shown.push_back(&column);
    } else if (column.header.find("gpu") != std::string::npos || column.header == "energy_kwh" ||
               column.header == "co2_kg" || column.header == "idle_spend" ||
               column.header == "egress_gb" || column.header == "storage_spend" ||
               column.header == "units") {
      unmeasured.push_back(column.header);
    }
  }
  std::vector<std::string> key_headers;
  for (const GroupBy& by : report.by) key_headers.push_back(to_string(by));
  if (key_headers.empty()) key_headers.push_back("all");
  const size_t key_count = key_headers.size(), cell_count = shown.size();

  // Rows: the groups, then the total. One row's keys and cells at a time, in these (reused).
  const size_t rows = report.groups.size() + 1;
  std::vector<std::string> keys(key_count), cells(cell_count);
  std::vector<MoneyColumn> money_columns(cell_count);  // filled by the widths' pass below
  GroupTotals group;  // the row's group, made again for each row (ReportGroups::fill)
  // `money`: the money cells too (the widths' pass measures those itself).
  auto fill = [&](size_t r, bool money) {
    const bool is_total = r + 1 == rows;
    if (!is_total) report.groups.fill(r, group);
    const GroupTotals& g = is_total ? report.total : group;
    for (size_t i = 0; i < key_count; ++i) {
      std::string_view value = i < g.key.size() ? key_text(g.key[i]) : "all";
      if (is_total) value = i == 0 ? "total" : "";
      keys[i] = escape_for_terminal(value);
    }
    for (size_t i = 0; i < cell_count; ++i) {
      const Column& column = *shown[i];
      if (!column.amount) {
        cells[i] = column.cell(g, true);
        continue;
      }
      if (!money) continue;
      std::optional<double> amount = column.amount(g);
      cells[i] = amount ? money_columns[i].text(*amount, currency) : std::string();
      if (amount && column.after) cells[i] += column.after(g);
    }
  };
  // The columns' widths, and the decimals of each money column: those its most precise amount
  // needs. A money cell's width is taken at each of the decimals it may be printed with, which are
  // known only once every row was seen. Each row is made again when it is written: 100,000 rows
  // kept were tens of MB of fresh pages, which took longer than making the rows twice.
  std::vector<size_t> key_widths(key_count);
  for (size_t i = 0; i < key_count; ++i) key_widths[i] = display_width(key_headers[i]);
  std::vector<size_t> widths(cell_count);
  for (size_t i = 0; i < cell_count; ++i) widths[i] = table_header(shown[i]->header).size();
  constexpr int kDecimals[] = {2, 4, 6};
  std::vector<std::array<size_t, 3>> money_widths(cell_count, {0, 0, 0});
  for (size_t r = 0; r < rows; ++r) {
    fill(r, false);
    for (size_t i = 0; i < key_count; ++i) {
      key_widths[i] = std::max(key_widths[i], display_width(keys[i]));
    }
    const bool is_total = r + 1 == rows;
    const GroupTotals& g = is_total ? report.total : group;
    for (size_t i = 0; i < cell_count; ++i) {
      if (!shown[i]->amount) {
        widths[i] = std::max(widths[i], cells[i].size());
        continue;
      }
      std::optional<double> amount = shown[i]->amount(g);
      if (!amount) continue;  // a blank cell
      money_columns[i].add(*amount);
      size_t after = shown[i]->after ? shown[i]->after(g).size() : 0;
      for (size_t d = 0; d < 3; ++d) {
        if (kDecimals[d] < money_columns[i].decimals()) continue;
        size_t width = format_money(*amount, currency, kDecimals[d]).size() + after;
        money_widths[i][d] = std::max(money_widths[i][d], width);
      }
    }
  }
  for (size_t i = 0; i < cell_count; ++i) {
    int decimals = money_columns[i].decimals();
    size_t d = decimals == 2 ? 0 : decimals == 4 ? 1 : 2;
    widths[i] = std::max(widths[i], money_widths[i][d]);
  }

  size_t numbers = 0;
  for (size_t w : widths) numbers += w + 2;
  // Names are shortened before the numbers: the table fits the terminal. With no width (not a
  // terminal: a pipe, a file) every name is whole, as grep and sort need them, and the bar full.
  size_t keys_total = 0;
  for (size_t w : key_widths) keys_total += w + 2;
  constexpr size_t kMinBar = 10, kFullBar = 40;
  size_t budget = width > 0 ? static_cast<size_t>(width) : keys_total + numbers + kFullBar;
  while (keys_total + numbers + kMinBar > budget) {
    auto widest = std::max_element(key_widths.begin(), key_widths.end());
    if (*widest <= 8) break;
    --*widest;
    --keys_total;
  }
  size_t used = keys_total + numbers;
  size_t bar_width = used < budget ? std::min<size_t>(budget - used, kFullBar) : 0;
  if (bar_width < 4) bar_width = 0;

  double biggest = 0;
  for (size_t r = 0; r < report.groups.size(); ++r) {
    biggest = std::max(biggest, report.groups.spend(r).units());
  }

  // The lines go out through one 64 KiB buffer, handed to `write` whenever it fills: a table of
  // 100,000 groups built in one string was 12 MB of fresh pages (a bar's block is 3 bytes of
  // UTF-8).
  const std::string_view block = "\u2588";
  constexpr size_t kChunk = 64 * 1024;
  std::string out;
  out.reserve(kChunk + keys_total + numbers + block.size() * bar_width + 256);
  auto flush = [&](bool always) {
    if (!out.empty() && (always || out.size() >= kChunk)) {
      write(out);
      out.clear();
    }
  };
  auto line = [&](const std::vector<std::string>& key, const std::vector<std::string>& row,
                  size_t blocks) {
    const size_t start = out.size();
    for (size_t i = 0; i < key_count; ++i) append_key(out, key[i], key_widths[i]);
    for (size_t i = 0; i < cell_count; ++i) {
      append_padded(out, row[i], widths[i], shown[i]->numeric);
      out += "  ";
    }
    for (size_t i = 0; i < blocks; ++i) out += block;
    while (out.size() > start && out.back() == ' ') out.pop_back();
    out += '\n';
    flush(false);
  };
  std::vector<std::string> header;
  for (const Column* column : shown) header.push_back(table_header(column->header));
  line(key_headers, header, 0);
  for (size_t r = 0; r < rows; ++r) {
    size_t blocks = 0;
    bool is_total = r + 1 == rows;
    if (!is_total && bar_width > 0 && biggest > 0) {
      // A negative spend (a ledger edited by hand) draws no bar: a negative share would wrap.
      Money spend = report.groups.spend(r);
      double share = std::clamp(spend.units() / biggest, 0.0, 1.0);
      blocks = static_cast<size_t>(std::lround(share * static_cast<double>(bar_width)));
      if (blocks == 0 && spend.micros > 0) blocks = 1;
    }
    if (is_total) out += "\n";
    fill(r, true);
    line(keys, cells, blocks);
  }
  if (report.total.running > 0) out += "* includes the spend so far of runs still running\n";
  if (!unmeasured.empty()) out += "not measured: " + join(unmeasured, ", ") + "\n";
  flush(true);
}

std::string report_csv(const Report& report, const std::string& currency, CsvCells cells) {
  std::vector<Column> all = columns();
  std::vector<std::string> header;
  for (const GroupBy& by : report.by) header.push_back(csv_field(to_string(by), cells));
  for (const Column& column : all) header.push_back(column.header);
  header.push_back("currency");
  std::string out = csv_line(header);
  for (const GroupTotals& g : report.groups) {
    std::vector<std::string> row;
    for (const std::string& value : g.key) row.push_back(csv_field(value, cells));
    for (const Column& column : all) row.push_back(csv_field(column.cell(g, false), cells));
    row.push_back(csv_field(currency, cells));
    out += csv_line(row);
  }
  return out;
}

namespace {

nlohmann::json group_json(const Report& report, const GroupTotals& g, const std::string& currency,
                          bool with_key) {
  nlohmann::json j = nlohmann::json::object();
  if (with_key) {
    nlohmann::json key = nlohmann::json::object();
    for (size_t i = 0; i < report.by.size() && i < g.key.size(); ++i) {
      key[to_string(report.by[i])] = g.key[i];
    }
    j["group"] = key;
  }
  auto opt = [](const std::optional<double>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json();
  };
  j["runs"] = g.runs;
  j["running"] = g.running;
  j["succeeded"] = g.succeeded;
  j["failed"] = g.failed;
  j["killed"] = g.killed;
  j["refused"] = g.refused;
  j["lost"] = g.lost;
  j["preempted"] = g.preempted;
  j["accepted"] = g.accepted;
  j["spend"] = money_to_json(g.spend);
  j["running_spend"] = money_to_json(g.running_spend);
  j["waste"] = money_to_json(g.waste);
  j["waste_share"] = g.waste_share();
  auto per_accepted = g.cost_per_accepted();
  j["cost_per_accepted"] = per_accepted ? nlohmann::json(money_to_json(*per_accepted)) : nullptr;
  j["gpu_hours_allocated"] = opt(g.gpu_hours_allocated.value());
  j["gpu_hours_busy"] = opt(g.gpu_hours_busy.value());
  j["utilisation"] = opt(g.utilisation());
  j["idle_spend"] = opt(g.idle_spend.value());
  j["energy_kwh"] = opt(g.energy_kwh.value());
  j["co2_kg"] = opt(g.co2_kg.value());
  j["units"] = opt(g.units.value());
  j["cost_per_thousand_units"] = opt(g.cost_per_thousand_units());
  j["egress_gb"] = opt(g.egress_gb.value());
  j["egress_spend"] = opt(g.egress_spend.value());
  j["storage_peak_gb"] = opt(g.storage_peak_gb.value());
  j["storage_spend"] = opt(g.storage_spend.value());
  if (g.per_point) {
    j["metric"] = g.metric_name ? nlohmann::json(*g.metric_name) : nullptr;
    j["best_metric"] = opt(g.best_metric);
    j["cost_per_metric_point"] = opt(g.per_point->per_point);
    j["cost_per_metric_point_text"] = g.per_point->text;
  }
  j["currency"] = currency;
  return j;
}

}  // namespace

std::string report_json(const Report& report, const std::string& currency) {
  nlohmann::json j = nlohmann::json::object();
  nlohmann::json by = nlohmann::json::array();
  for (const GroupBy& b : report.by) by.push_back(to_string(b));
  j["by"] = by;
  j["currency"] = currency;
  nlohmann::json groups = nlohmann::json::array();
  for (const GroupTotals& g : report.groups)
    groups.push_back(group_json(report, g, currency, true));
  j["groups"] = groups;
  j["total"] = group_json(report, report.total, currency, false);
  return dump_json(j, 2) + "\n";
}

}  // namespace spendcap
