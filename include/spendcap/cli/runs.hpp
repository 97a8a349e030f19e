// `spendcap runs`: the run history, one row a run, newest first, as `sacct` lists jobs; and the
// one rule for a run id given on the command line: any unique prefix of it (`ps`, `runs` and the
// end line print the shortest unique one, at least 8 characters). Errors are thrown as
// spendcap::Error (exit 125) naming the flag.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "spendcap/base/money.hpp"
#include "spendcap/cli/admin.hpp"

namespace spendcap {

class Ledger;
struct RunView;
struct BudgetRule;

struct RunsRequest {
  LedgerChoice choice;
  std::optional<std::string> since, until, team, experiment, user, status;
  int limit = 50;
  bool json = false;
  std::string format = "table";  // table, csv or json
};

int runs_command(const RunsRequest& request);

// The full id of the one run (any status) whose id starts with `prefix`. None or several: throws
// naming `what` ("show 1a2b") with the candidates.
std::string resolve_run_id(Ledger& ledger, const std::string& prefix, const std::string& what);

// A cell of print_table: text, and amounts of money within it ("$5.00 (max_run of team:t4)"),
// which print_table shows with the decimals of their column (MoneyColumn): a column never mixes
// "$0.00" and "$0.0042".
class TableCell {
 public:
  TableCell(std::string text = {}) { parts_.push_back({std::move(text), std::nullopt, {}}); }
  TableCell(const char* text) : TableCell(std::string(text)) {}
  static TableCell money(Money amount, std::string_view currency);

  TableCell& operator+=(const TableCell& more);
  friend TableCell operator+(TableCell a, const TableCell& b) { return a += b; }

  // The amounts in it.
  void add_amounts_to(MoneyColumn& column) const;
  // The text, its amounts with the column's decimals.
  std::string text(const MoneyColumn& column) const;

 private:
  struct Part {
    std::string text;
    std::optional<Money> amount;
    std::string currency;
  };
  std::vector<Part> parts_;
};

// Rows as left-aligned columns, each cell escaped for the terminal (names come from other users),
// every amount of money of one column with the same decimals. With a `width` (terminal_width()),
// the table fits it: the `cut` columns (names, free text) are shortened, the widest first, none
// below its header (the first row) nor kMinCutColumn characters, a cut cell ending in "~"; the
// others (ids, figures, times) are never cut. A table that does not fit even so runs over. Width
// 0: every cell whole.
void print_table(const std::vector<std::vector<TableCell>>& rows, int width = 0,
                 const std::vector<std::size_t>& cut = {});
inline constexpr std::size_t kMinCutColumn = 4;

// The width a table is to fit: the terminal's (stdout's); else $COLUMNS when set (a width asked
// for, 21 to 9999); else 0, no width: through a pipe or into a file every name is printed whole
// (issue 40). `report` and `ps` fit it.
int terminal_width();

// The run's budget in effect and where it came from ("flag --budget", "max_run of team:vision";
// none and "" when neither), as recorded at its admission (ledger.hpp's budget_source_text). A
// run recorded before the ledger kept it (schema v19): its --budget lowered to (or, without one,
// set by) the smallest max_run of its scopes among the ledger's budgets as they are now.
struct ShownBudget {
  std::optional<Money> amount;
  std::string source;
  bool recorded = false;  // false: derived from today's budgets
};
ShownBudget run_budget_of(const RunView& run, const std::vector<BudgetRule>& rules);
// "2026-12-01T21:40:05Z".
std::string iso_time(double unix_seconds);

}  // namespace spendcap
