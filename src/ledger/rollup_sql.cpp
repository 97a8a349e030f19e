// The rollups' SQL for both stores. Contract in rollup_sql.hpp.
#include "spendcap/ledger/rollup_sql.hpp"

#include <algorithm>
#include <string_view>

#include "spendcap/ledger/waste.hpp"

namespace spendcap::rollup_sql {

namespace {

enum class Combine { sum, least, greatest };
enum class Type { integer, real };

// What one finished run adds to its cell, as SQL over the run's row (R. is the row).
struct Column {
  const char* name;
  Type type;
  const char* value;
  Combine combine = Combine::sum;
};

const Column kColumns[] = {
    {"runs", Type::integer, "1"},
    {"succeeded", Type::integer, "CASE WHEN R.status = 'succeeded' THEN 1 ELSE 0 END"},
    {"failed", Type::integer, "CASE WHEN R.status = 'failed' THEN 1 ELSE 0 END"},
    {"killed", Type::integer, "CASE WHEN R.status = 'killed' THEN 1 ELSE 0 END"},
    {"refused", Type::integer, "CASE WHEN R.status = 'refused' THEN 1 ELSE 0 END"},
    {"lost", Type::integer, "CASE WHEN R.status = 'lost' THEN 1 ELSE 0 END"},
    {"preempted", Type::integer, "CASE WHEN R.status = 'preempted' THEN 1 ELSE 0 END"},
    {"spend_micros", Type::integer, "R.spend_micros"},
    // v14's waste: what runs that did not succeed spent. From v26 on, value_of gives waste.hpp's
    // rule instead (a killed run that wrote its checkpoint wastes only the spend after it).
    {"waste_micros", Type::integer,
     "CASE WHEN R.status IN ('failed', 'killed', 'lost', 'preempted') THEN R.spend_micros ELSE 0 "
     "END"},
    {"units_spend_micros", Type::integer,
     "CASE WHEN R.units IS NOT NULL THEN R.spend_micros ELSE 0 END"},
    // A GPU record counts only when measured (gpu_measured = 1), as the report reads it.
    {"gpu_runs", Type::integer, "CASE WHEN R.gpu_measured = 1 THEN 1 ELSE 0 END"},
    {"gpu_allocated_seconds", Type::real,
     "CASE WHEN R.gpu_measured = 1 THEN COALESCE(R.gpu_allocated_seconds, 0) ELSE 0 END"},
    {"busy_runs", Type::integer,
     "CASE WHEN R.gpu_measured = 1 AND R.gpu_busy_seconds IS NOT NULL THEN 1 ELSE 0 END"},
    {"gpu_busy_seconds", Type::real,
     "CASE WHEN R.gpu_measured = 1 THEN COALESCE(R.gpu_busy_seconds, 0) ELSE 0 END"},
    {"idle_runs", Type::integer,
     "CASE WHEN R.gpu_measured = 1 AND R.gpu_idle_spend_micros IS NOT NULL THEN 1 ELSE 0 END"},
    {"idle_spend_micros", Type::integer,
     "CASE WHEN R.gpu_measured = 1 THEN COALESCE(R.gpu_idle_spend_micros, 0) ELSE 0 END"},
    {"energy_runs", Type::integer,
     "CASE WHEN R.gpu_measured = 1 AND R.gpu_energy_kwh IS NOT NULL THEN 1 ELSE 0 END"},
    {"energy_kwh", Type::real,
     "CASE WHEN R.gpu_measured = 1 THEN COALESCE(R.gpu_energy_kwh, 0) ELSE 0 END"},
    {"co2_runs", Type::integer,
     "CASE WHEN R.gpu_measured = 1 AND R.gpu_co2_kg IS NOT NULL THEN 1 ELSE 0 END"},
    {"co2_kg", Type::real,
     "CASE WHEN R.gpu_measured = 1 THEN COALESCE(R.gpu_co2_kg, 0) ELSE 0 END"},
    {"units_runs", Type::integer, "CASE WHEN R.units IS NOT NULL THEN 1 ELSE 0 END"},
    {"units", Type::real, "COALESCE(R.units, 0)"},
    {"egress_runs", Type::integer, "CASE WHEN R.egress_gb IS NOT NULL THEN 1 ELSE 0 END"},
    {"egress_gb", Type::real, "COALESCE(R.egress_gb, 0)"},
    {"storage_spend_runs", Type::integer,
     "CASE WHEN R.storage_spend_micros IS NOT NULL THEN 1 ELSE 0 END"},
    {"storage_spend_micros", Type::integer, "COALESCE(R.storage_spend_micros, 0)"},
    {"storage_peak_runs", Type::integer,
     "CASE WHEN R.storage_peak_gb IS NOT NULL THEN 1 ELSE 0 END"},
    {"storage_peak_gb", Type::real, "COALESCE(R.storage_peak_gb, 0)", Combine::greatest},
    {"started_first", Type::real, "R.started_at", Combine::least},
    {"started_last", Type::real, "R.started_at", Combine::greatest},
};

const char* const kKey = "cut, bucket, team, experiment, project, user_name, host, pricing";

// A column's value under `rules`: kColumns' own, but for what a later version changed.
std::string value_of(const Column& column, Dialect dialect, Rules rules) {
  if (rules >= Rules::v26 && std::string_view(column.name) == "waste_micros") {
    return wasted_spend_sql(dialect);
  }
  return column.value;
}

// The run columns the cells are made of (the columns' values, the key, the metric's range): what
// SQLite's journal keeps of a run's row. v15's journal; v26 adds the two its waste reads.
const char* const kRowColumns =
    "status, day, team, experiment, project, user_name, host, pricing, spend_micros, units, "
    "gpu_measured, gpu_allocated_seconds, gpu_busy_seconds, gpu_idle_spend_micros, "
    "gpu_energy_kwh, gpu_co2_kg, egress_gb, storage_spend_micros, storage_peak_gb, started_at, "
    "metric_name, metric_value";
const char* const kRowColumnsV26 =
    "status, day, team, experiment, project, user_name, host, pricing, spend_micros, units, "
    "gpu_measured, gpu_allocated_seconds, gpu_busy_seconds, gpu_idle_spend_micros, "
    "gpu_energy_kwh, gpu_co2_kg, egress_gb, storage_spend_micros, storage_peak_gb, started_at, "
    "metric_name, metric_value, elapsed_seconds, checkpoint_written_seconds";

const char* row_columns_of(Rules rules) {
  return rules >= Rules::v26 ? kRowColumnsV26 : kRowColumns;
}

std::string with_row(std::string sql, const std::string& row) {
  for (size_t at = sql.find("R."); at != std::string::npos; at = sql.find("R.", at)) {
    sql.replace(at, 1, row);
    at += row.size() + 1;
  }
  return sql;
}

std::string type_of(Dialect dialect, Type type) {
  if (type == Type::real) return dialect == Dialect::sqlite ? "REAL" : "DOUBLE PRECISION";
  return dialect == Dialect::sqlite ? "INTEGER" : "BIGINT";
}

std::string two_argument(Dialect dialect, Combine combine) {
  if (combine == Combine::least) return dialect == Dialect::sqlite ? "min" : "LEAST";
  return dialect == Dialect::sqlite ? "max" : "GREATEST";
}

// The bucket of the run row R for `cut`: its start day, or the first day of that day's month.
std::string bucket_of(Dialect dialect, const RollupCut& cut) {
  if (cut.grain == RollupGrain::day) return "R.day";
  if (cut.grain == RollupGrain::total) return "0";
  if (dialect == Dialect::sqlite) {
    return "CAST(strftime('%s', R.day * 86400, 'unixepoch', 'start of month') AS INTEGER) / 86400";
  }
  return "CAST(floor(EXTRACT(EPOCH FROM date_trunc('month', to_timestamp(R.day * 86400) AT TIME "
         "ZONE 'UTC')) / 86400) AS BIGINT)";
}

std::string key_values(Dialect dialect, const RollupCut& cut) {
  auto kept = [](bool in_cut, const char* column) {
    return in_cut ? std::string("R.") + column : std::string("''");
  };
  return std::to_string(cut.id) + ", " + bucket_of(dialect, cut) + ", " + kept(cut.team, "team") +
         ", " + kept(cut.experiment, "experiment") + ", " + kept(cut.project, "project") + ", " +
         kept(cut.user, "user_name") + ", " + kept(cut.host, "host") + ", COALESCE(R.pricing, '')";
}

std::string column_names() {
  std::string names = kKey;
  for (const Column& column : kColumns) names += std::string(", ") + column.name;
  return names;
}

}  // namespace

std::string create_tables(Dialect dialect) {
  std::string sql =
      "CREATE TABLE rollups (\n  cut INTEGER NOT NULL,\n  bucket " +
      type_of(dialect, Type::integer) +
      " NOT NULL,\n  team TEXT NOT NULL,\n  experiment TEXT NOT NULL,\n  project TEXT NOT "
      "NULL,\n  user_name TEXT NOT NULL,\n  host TEXT NOT NULL,\n  pricing TEXT NOT NULL,\n";
  for (const Column& column : kColumns) {
    sql += std::string("  ") + column.name + " " + type_of(dialect, column.type) + " NOT NULL,\n";
  }
  std::string without_rowid = dialect == Dialect::sqlite ? " WITHOUT ROWID" : "";
  sql += "  PRIMARY KEY (" + std::string(kKey) + ")\n)" + without_rowid + ";\n";
  sql += "CREATE TABLE rollup_metrics (\n  cut INTEGER NOT NULL,\n  bucket " +
         type_of(dialect, Type::integer) +
         " NOT NULL,\n  team TEXT NOT NULL,\n  experiment TEXT NOT NULL,\n  project TEXT NOT "
         "NULL,\n  user_name TEXT NOT NULL,\n  host TEXT NOT NULL,\n  pricing TEXT NOT NULL,\n  "
         "metric_name TEXT NOT NULL,\n  lowest " +
         type_of(dialect, Type::real) + " NOT NULL,\n  highest " + type_of(dialect, Type::real) +
         " NOT NULL,\n  PRIMARY KEY (" + kKey + ", metric_name)\n)" + without_rowid + ";\n";
  return sql;
}

namespace {
std::string move_run(Dialect dialect, const std::string& row, int sign, Rules rules) {
  std::string sql;
  std::string finished = " WHERE R.status <> 'running'";
  for (const RollupCut& cut : rollup_cuts()) {
    std::string values = key_values(dialect, cut);
    std::string updates;
    for (const Column& column : kColumns) {
      bool sum = column.combine == Combine::sum;
      values += std::string(", ") + (sum && sign < 0 ? "-(" : "(") +
                value_of(column, dialect, rules) + ")";
      if (!updates.empty()) updates += ", ";
      updates += std::string(column.name) + " = ";
      updates += sum ? std::string("rollups.") + column.name + " + excluded." + column.name
                     : two_argument(dialect, column.combine) + "(rollups." + column.name +
                           ", excluded." + column.name + ")";
    }
    sql += "INSERT INTO rollups (" + column_names() + ") SELECT " + values + finished +
           " ON CONFLICT (" + kKey + ") DO UPDATE SET " + updates + ";\n";
    if (sign < 0) continue;
    // A metric's range, over runs that reported a finite value (the report's own test).
    sql += "INSERT INTO rollup_metrics (" + std::string(kKey) +
           ", metric_name, lowest, highest) SELECT " + key_values(dialect, cut) +
           ", R.metric_name, R.metric_value, R.metric_value" + finished +
           " AND R.metric_name IS NOT NULL AND R.metric_value BETWEEN -1.7e308 AND 1.7e308 "
           "ON CONFLICT (" +
           kKey + ", metric_name) DO UPDATE SET lowest = " + two_argument(dialect, Combine::least) +
           "(rollup_metrics.lowest, excluded.lowest), highest = " +
           two_argument(dialect, Combine::greatest) +
           "(rollup_metrics.highest, excluded.highest);\n";
  }
  return with_row(sql, row);
}
}  // namespace

std::string move_run(Dialect dialect, const std::string& row, int sign) {
  return move_run(dialect, row, sign, kLatestRules);
}

std::string sqlite_v14_triggers() {
  const Rules v14 = Rules::v14;
  return "CREATE TRIGGER runs_rollup_insert AFTER INSERT ON runs WHEN NEW.status <> 'running' "
         "BEGIN\n" +
         move_run(Dialect::sqlite, "NEW", 1, v14) +
         "END;\n"
         "CREATE TRIGGER runs_rollup_update AFTER UPDATE ON runs "
         "WHEN OLD.status <> 'running' OR NEW.status <> 'running' BEGIN\n" +
         move_run(Dialect::sqlite, "OLD", -1, v14) + move_run(Dialect::sqlite, "NEW", 1, v14) +
         "END;\n"
         "CREATE TRIGGER runs_rollup_delete AFTER DELETE ON runs WHEN OLD.status <> 'running' "
         "BEGIN\n" +
         move_run(Dialect::sqlite, "OLD", -1, v14) + "END;\n";
}

namespace {

const char* aggregate_of(Combine combine) {
  return combine == Combine::sum ? "sum" : combine == Combine::least ? "min" : "max";
}

// `row.` before each of the journal's row columns ("NEW.status, NEW.day, ...").
std::string row_columns(const std::string& row, Rules rules) {
  std::string columns;
  std::string all = row_columns_of(rules);
  for (size_t at = 0; at < all.size();) {
    size_t end = all.find(", ", at);
    if (end == std::string::npos) end = all.size();
    columns += (columns.empty() ? "" : ", ") + row + "." + all.substr(at, end - at);
    at = end + 2;
  }
  return columns;
}

// Common table expressions: every cut as a row of a table c (id, grain: 0 day, 1 month, 2 total,
// then 1 where the cut keeps team, experiment, project, user, host), and p: the journal's rows
// summed into their cells of every cut, as rollups' columns, and pm: their metrics' ranges, as
// rollup_metrics'. The journal is v26's (the latest): only the store's statements read it.
std::string pending_cells() {
  std::string cuts;
  for (const RollupCut& cut : rollup_cuts()) {
    int grain = cut.grain == RollupGrain::day ? 0 : cut.grain == RollupGrain::month ? 1 : 2;
    cuts += std::string(cuts.empty() ? "" : ", ") + "(" + std::to_string(cut.id) + ", " +
            std::to_string(grain) + ", " + std::to_string(int{cut.team}) + ", " +
            std::to_string(int{cut.experiment}) + ", " + std::to_string(int{cut.project}) + ", " +
            std::to_string(int{cut.user}) + ", " + std::to_string(int{cut.host}) + ")";
  }
  RollupCut month;
  month.grain = RollupGrain::month;
  std::string key = "c.id, CASE c.grain WHEN 0 THEN R.day WHEN 1 THEN " +
                    bucket_of(Dialect::sqlite, month) + " ELSE 0 END";
  for (const char* column : {"team", "experiment", "project", "user_name", "host"}) {
    key += std::string(", CASE WHEN c.") + column + " THEN R." + column + " ELSE '' END";
  }
  key += ", COALESCE(R.pricing, '')";
  std::string values = key;
  for (const Column& column : kColumns) {
    std::string value = value_of(column, Dialect::sqlite, kLatestRules);
    values += column.combine == Combine::sum
                  ? ", sum(R.sign * (" + value + "))"
                  : std::string(", ") + aggregate_of(column.combine) + "(" + value + ")";
  }
  std::string metrics = key + ", R.metric_name, min(R.metric_value), max(R.metric_value)";
  return "c (id, grain, team, experiment, project, user_name, host) AS (VALUES " + cuts +
         "),\n  p (" + column_names() + ") AS (SELECT " + values +
         " FROM rollup_journal R, c GROUP BY 1, 2, 3, 4, 5, 6, 7, 8),\n  pm (" + kKey +
         ", metric_name, lowest, highest) AS (SELECT " + metrics +
         " FROM rollup_journal R, c WHERE R.sign > 0 AND R.metric_name IS NOT NULL AND "
         "R.metric_value BETWEEN -1.7e308 AND 1.7e308 GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9)";
}

// Each column's combination of two values a and b of one cell.
std::string combined(const Column& column, const std::string& a, const std::string& b) {
  if (column.combine == Combine::sum) return a + " + " + b;
  return std::string(column.combine == Combine::least ? "min" : "max") + "(" + a + ", " + b + ")";
}

// The cells of rollups and of the journal p together, one row per key (SQLite).
std::string stored_and_pending(const std::string& where) {
  std::string columns = kKey;
  for (const Column& column : kColumns) {
    columns += std::string(", ") + aggregate_of(column.combine) + "(" + column.name + ") AS " +
               column.name;
  }
  return "SELECT " + columns + " FROM (SELECT " + column_names() + " FROM rollups" + where +
         " UNION ALL SELECT " + column_names() + " FROM p" + where +
         ") GROUP BY 1, 2, 3, 4, 5, 6, 7, 8";
}

}  // namespace

std::string sqlite_journal() {
  return std::string(
             "DROP TRIGGER runs_rollup_insert;\nDROP TRIGGER runs_rollup_update;\n"
             "DROP TRIGGER runs_rollup_delete;\n"
             "CREATE TABLE rollup_journal (\n  sign INTEGER NOT NULL,\n  status TEXT NOT NULL,\n"
             "  day INTEGER NOT NULL,\n  team TEXT NOT NULL,\n  experiment TEXT NOT NULL,\n"
             "  project TEXT NOT NULL,\n  user_name TEXT NOT NULL,\n  host TEXT NOT NULL,\n"
             "  pricing TEXT,\n  spend_micros INTEGER NOT NULL,\n  units REAL,\n"
             "  gpu_measured INTEGER,\n  gpu_allocated_seconds REAL,\n  gpu_busy_seconds REAL,\n"
             "  gpu_idle_spend_micros INTEGER,\n  gpu_energy_kwh REAL,\n  gpu_co2_kg REAL,\n"
             "  egress_gb REAL,\n  storage_spend_micros INTEGER,\n  storage_peak_gb REAL,\n"
             "  started_at REAL NOT NULL,\n  metric_name TEXT,\n  metric_value REAL\n);\n") +
         sqlite_journal_triggers();
}

std::string sqlite_journal_triggers() {
  return sqlite_journal_triggers(Rules::v14);
}

std::string sqlite_journal_triggers(Rules rules) {
  const char* columns = row_columns_of(rules);
  std::string into = std::string("INSERT INTO rollup_journal (sign, ") + columns + ") ";
  // An UPDATE that sets none of these columns leaves the cells as they are: SQLite does not even
  // compile the trigger into it.
  return "CREATE TRIGGER runs_rollup_insert AFTER INSERT ON runs WHEN NEW.status <> 'running' "
         "BEGIN " +
         into + "VALUES (1, " + row_columns("NEW", rules) +
         "); END;\n"
         "CREATE TRIGGER runs_rollup_update AFTER UPDATE OF " +
         columns + " ON runs WHEN OLD.status <> 'running' OR NEW.status <> 'running' BEGIN " +
         into + "SELECT -1, " + row_columns("OLD", rules) + " WHERE OLD.status <> 'running'; " +
         into + "SELECT 1, " + row_columns("NEW", rules) +
         " WHERE NEW.status <> 'running'; END;\n"
         "CREATE TRIGGER runs_rollup_delete AFTER DELETE ON runs WHEN OLD.status <> 'running' "
         "BEGIN " +
         into + "VALUES (-1, " + row_columns("OLD", rules) + "); END;\n";
}

std::string sqlite_journal_v26() {
  // The journal's rows waiting are dropped: the rebuild counts every run from its row.
  return "ALTER TABLE rollup_journal ADD COLUMN elapsed_seconds REAL;\n"
         "ALTER TABLE rollup_journal ADD COLUMN checkpoint_written_seconds REAL;\n"
         "DROP TRIGGER runs_rollup_insert;\nDROP TRIGGER runs_rollup_update;\n"
         "DROP TRIGGER runs_rollup_delete;\n" +
         sqlite_journal_triggers(Rules::v26) + "DELETE FROM rollup_journal;\n" +
         rebuild(Dialect::sqlite, Rules::v26);
}

std::vector<std::string> sqlite_fold() {
  std::string updates;
  for (const Column& column : kColumns) {
    updates += std::string(updates.empty() ? "" : ", ") + column.name + " = " +
               combined(column, std::string("rollups.") + column.name,
                        std::string("excluded.") + column.name);
  }
  return {"WITH " + pending_cells() + "\nINSERT INTO rollups (" + column_names() + ") SELECT " +
              column_names() + " FROM p WHERE true ON CONFLICT (" + kKey + ") DO UPDATE SET " +
              updates,
          "WITH " + pending_cells() + "\nINSERT INTO rollup_metrics (" + kKey +
              ", metric_name, lowest, highest) SELECT " + kKey +
              ", metric_name, lowest, highest FROM pm WHERE true ON CONFLICT (" + kKey +
              ", metric_name) DO UPDATE SET lowest = min(rollup_metrics.lowest, excluded.lowest), "
              "highest = max(rollup_metrics.highest, excluded.highest)",
          "DELETE FROM rollup_journal"};
}

std::string rebuild(Dialect dialect) {
  return rebuild(dialect, Rules::v14);
}

std::string rebuild(Dialect dialect, Rules rules) {
  std::string sql = "DELETE FROM rollups;\nDELETE FROM rollup_metrics;\n";
  for (const RollupCut& cut : rollup_cuts()) {
    std::string values = key_values(dialect, cut);
    for (const Column& column : kColumns) {
      std::string aggregate = column.combine == Combine::sum     ? "sum"
                              : column.combine == Combine::least ? "min"
                                                                 : "max";
      values += ", " + aggregate + "(" + value_of(column, dialect, rules) + ")";
    }
    sql += "INSERT INTO rollups (" + column_names() + ") SELECT " + values +
           " FROM runs R WHERE R.status <> 'running' GROUP BY 1, 2, 3, 4, 5, 6, 7, 8;\n";
    sql += "INSERT INTO rollup_metrics (" + std::string(kKey) +
           ", metric_name, lowest, highest) SELECT " + key_values(dialect, cut) +
           ", R.metric_name, min(R.metric_value), max(R.metric_value) FROM runs R WHERE R.status "
           "<> 'running' AND R.metric_name IS NOT NULL AND R.metric_value BETWEEN -1.7e308 AND "
           "1.7e308 GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9;\n";
  }
  return with_row(sql, "R");
}

std::string differences(Dialect dialect) {
  // What rebuild() would store (side 0), against what is stored (side 1: on SQLite the journal's
  // rows too), in one grouping by key: a missing cell and a cell of no runs are the same. (A join
  // of the two sides was a nested loop on SQLite, whose verify the randomized conformance case
  // runs at every step.) Sums of seconds and kWh may differ in their last bits by the order of
  // additions.
  std::string sides;
  for (const RollupCut& cut : rollup_cuts()) {
    std::string values = key_values(dialect, cut);
    for (const Column& column : kColumns) {
      values += std::string(", ") + aggregate_of(column.combine) + "(" +
                value_of(column, dialect, kLatestRules) + ")";
    }
    sides +=
        "SELECT " + values +
        ", 0 FROM runs R WHERE R.status <> 'running' GROUP BY 1, 2, 3, 4, 5, 6, 7, 8 UNION ALL ";
  }
  bool sqlite = dialect == Dialect::sqlite;
  sides += "SELECT " + column_names() + ", 1 FROM rollups";
  if (sqlite) sides += " UNION ALL SELECT " + column_names() + ", 1 FROM p";
  auto side = [](const Column& column, int which) {
    return std::string("COALESCE(") + aggregate_of(column.combine) +
           "(CASE WHEN side = " + std::to_string(which) + " THEN " + column.name + " END), 0)";
  };
  std::string differ;
  for (const Column& column : kColumns) {
    std::string e = side(column, 0), a = side(column, 1);
    if (!differ.empty()) differ += " OR ";
    differ += column.type == Type::integer
                  ? e + " <> " + a
                  : "abs(" + e + " - " + a + ") > 1e-6 * (1 + abs(" + e + "))";
  }
  auto named = [](std::string_view name) {
    return *std::find_if(std::begin(kColumns), std::end(kColumns),
                         [&](const Column& column) { return column.name == name; });
  };
  const Column& runs = named("runs");
  const Column& spend = named("spend_micros");
  return with_row("WITH " + (sqlite ? pending_cells() + ", " : std::string()) + "sides (" +
                      column_names() + ", side) AS (" + sides + ") SELECT " + kKey + ", " +
                      side(runs, 0) + ", " + side(runs, 1) + ", " + side(spend, 0) + ", " +
                      side(spend, 1) + " FROM sides GROUP BY 1, 2, 3, 4, 5, 6, 7, 8 HAVING NOT (" +
                      side(runs, 0) + " = 0 AND " + side(runs, 1) + " = 0) AND (" + differ + ")",
                  "R");
}

namespace {
// The condition on a span's cells: cut, first and last bucket, then the team and the experiment
// when asked for (numbered placeholders: "?1" or "$1").
std::string span_where(Dialect dialect, bool team, bool experiment) {
  auto at = [dialect](int n) {
    return (dialect == Dialect::sqlite ? "?" : "$") + std::to_string(n);
  };
  std::string sql = " WHERE cut = " + at(1) + " AND bucket BETWEEN " + at(2) + " AND " + at(3);
  int next = 4;
  if (team) sql += " AND team = " + at(next++);
  if (experiment) sql += " AND experiment = " + at(next++);
  return sql;
}
}  // namespace

std::string select_cells(Dialect dialect, bool team, bool experiment) {
  return "SELECT " + column_names() + " FROM rollups" + span_where(dialect, team, experiment) +
         " AND runs <> 0";
}

std::string select_metrics(Dialect dialect, bool team, bool experiment) {
  return "SELECT " + std::string(kKey) + ", metric_name, lowest, highest FROM rollup_metrics" +
         span_where(dialect, team, experiment);
}

std::string sqlite_select_cells_and_pending(bool team, bool experiment) {
  return "WITH " + pending_cells() + " SELECT * FROM (" +
         stored_and_pending(span_where(Dialect::sqlite, team, experiment)) + ") WHERE runs <> 0";
}

std::string sqlite_select_metrics_and_pending(bool team, bool experiment) {
  std::string where = span_where(Dialect::sqlite, team, experiment);
  std::string columns = std::string(kKey) + ", metric_name, lowest, highest";
  return "WITH " + pending_cells() + " SELECT " + kKey +
         ", metric_name, min(lowest), max(highest) FROM (SELECT " + columns +
         " FROM rollup_metrics" + where + " UNION ALL SELECT " + columns + " FROM pm" + where +
         ") GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9";
}

}  // namespace spendcap::rollup_sql
