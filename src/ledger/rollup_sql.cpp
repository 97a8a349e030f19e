// The rollups' SQL for both stores. Contract in rollup_sql.hpp.
#include "spendcap/ledger/rollup_sql.hpp"

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
    // As report.cpp's waste: what runs that did not succeed spent.
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

std::string move_run(Dialect dialect, const std::string& row, int sign) {
  std::string sql;
  std::string finished = " WHERE R.status <> 'running'";
  for (const RollupCut& cut : rollup_cuts()) {
    std::string values = key_values(dialect, cut);
    std::string updates;
    for (const Column& column : kColumns) {
      bool sum = column.combine == Combine::sum;
      values += std::string(", ") + (sum && sign < 0 ? "-(" : "(") + column.value + ")";
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

std::string sqlite_triggers() {
  return "CREATE TRIGGER runs_rollup_insert AFTER INSERT ON runs WHEN NEW.status <> 'running' "
         "BEGIN\n" +
         move_run(Dialect::sqlite, "NEW", 1) +
         "END;\n"
         "CREATE TRIGGER runs_rollup_update AFTER UPDATE ON runs "
         "WHEN OLD.status <> 'running' OR NEW.status <> 'running' BEGIN\n" +
         move_run(Dialect::sqlite, "OLD", -1) + move_run(Dialect::sqlite, "NEW", 1) +
         "END;\n"
         "CREATE TRIGGER runs_rollup_delete AFTER DELETE ON runs WHEN OLD.status <> 'running' "
         "BEGIN\n" +
         move_run(Dialect::sqlite, "OLD", -1) + "END;\n";
}

std::string rebuild(Dialect dialect) {
  std::string sql = "DELETE FROM rollups;\nDELETE FROM rollup_metrics;\n";
  for (const RollupCut& cut : rollup_cuts()) {
    std::string values = key_values(dialect, cut);
    for (const Column& column : kColumns) {
      std::string aggregate = column.combine == Combine::sum     ? "sum"
                              : column.combine == Combine::least ? "min"
                                                                 : "max";
      values += ", " + aggregate + "(" + column.value + ")";
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
  // What rebuild() would store, against what is stored; a missing cell and a cell of no runs are
  // the same. Sums of seconds and kWh may differ in their last bits by the order of additions.
  std::string expected;
  for (const RollupCut& cut : rollup_cuts()) {
    std::string values = key_values(dialect, cut);
    for (const Column& column : kColumns) {
      std::string aggregate = column.combine == Combine::sum     ? "sum"
                              : column.combine == Combine::least ? "min"
                                                                 : "max";
      values += ", " + aggregate + "(" + column.value + ") AS " + column.name;
    }
    if (!expected.empty()) expected += " UNION ALL ";
    expected += "SELECT " + values +
                " FROM runs R WHERE R.status <> 'running' GROUP BY 1, 2, 3, 4, 5, 6, 7, 8";
  }
  std::string join;
  for (const char* key :
       {"cut", "bucket", "team", "experiment", "project", "user_name", "host", "pricing"}) {
    join += std::string(join.empty() ? "" : " AND ") + "a." + key + " = e." + key;
  }
  std::string differ;
  for (const Column& column : kColumns) {
    std::string e = std::string("COALESCE(e.") + column.name + ", 0)";
    std::string a = std::string("COALESCE(a.") + column.name + ", 0)";
    if (!differ.empty()) differ += " OR ";
    differ += column.type == Type::integer
                  ? e + " <> " + a
                  : "abs(" + e + " - " + a + ") > 1e-6 * (1 + abs(" + e + "))";
  }
  return with_row(
      "WITH e (" + column_names() + ") AS (" + expected +
          ") SELECT COALESCE(e.cut, a.cut), COALESCE(e.bucket, a.bucket), "
          "COALESCE(e.team, a.team), COALESCE(e.experiment, a.experiment), "
          "COALESCE(e.project, a.project), COALESCE(e.user_name, a.user_name), "
          "COALESCE(e.host, a.host), COALESCE(e.pricing, a.pricing), COALESCE(e.runs, 0), "
          "COALESCE(a.runs, 0), COALESCE(e.spend_micros, 0), COALESCE(a.spend_micros, 0) "
          "FROM e FULL JOIN rollups a ON " +
          join + " WHERE NOT (COALESCE(e.runs, 0) = 0 AND COALESCE(a.runs, 0) = 0) AND (" + differ +
          ")",
      "R");
}

namespace {
std::string select_from(Dialect dialect, const std::string& columns, const char* table, bool team,
                        bool experiment) {
  auto at = [dialect](int n) {
    return dialect == Dialect::sqlite ? std::string("?") : "$" + std::to_string(n);
  };
  std::string sql = "SELECT " + columns + " FROM " + table + " WHERE cut = " + at(1) +
                    " AND bucket BETWEEN " + at(2) + " AND " + at(3);
  int next = 4;
  if (team) sql += " AND team = " + at(next++);
  if (experiment) sql += " AND experiment = " + at(next++);
  return sql;
}
}  // namespace

std::string select_cells(Dialect dialect, bool team, bool experiment) {
  return select_from(dialect, column_names(), "rollups", team, experiment) + " AND runs <> 0";
}

std::string select_metrics(Dialect dialect, bool team, bool experiment) {
  return select_from(dialect, std::string(kKey) + ", metric_name, lowest, highest",
                     "rollup_metrics", team, experiment);
}

}  // namespace spendcap::rollup_sql
