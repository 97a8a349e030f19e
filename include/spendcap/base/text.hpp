// Small text helpers shared by the policy, the CLI and the messages.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace spendcap {

// A random (version 4) UUID, lowercase: run ids and webhook event ids.
std::string random_uuid();

// How `format_utc` writes a time. Every UTC time spendcap prints goes through it, so the forms
// stay few and each is named here.
enum class UtcForm {
  rfc3339,    // "2026-12-01T10:07:03Z": RFC 3339 / ISO 8601 (json, csv, FOCUS, webhooks)
  date,       // "2026-12-01": a day (report --by day, budgets' periods)
  clock,      // "2026-12-01 10:07:03": sortable, for tables (`runs`)
  clock_z,    // "2026-12-01 10:07:03Z": tables that mark the zone (`ps`, the outbox)
  clock_utc,  // "2026-12-01 10:07:03 UTC": a time inside a sentence (the crash-loop refusal)
};

// Unix seconds (truncated to the second, towards minus infinity) as a UTC time in `form`.
std::string format_utc(double unix_seconds, UtcForm form);

// "2026-12-01T10:07:03Z": format_utc(unix_seconds, UtcForm::rfc3339).
std::string rfc3339_utc(double unix_seconds);

// The UTC calendar fields of `unix_seconds` (gmtime_r's std::tm): for period math (months).
struct UtcFields {
  int year;   // e.g. 2026
  int month;  // 1..12
  int day;    // 1..31
};
UtcFields utc_fields(double unix_seconds);

// "a, b, c" from {"a", "b", "c"} and ", ".
std::string join(const std::vector<std::string>& items, std::string_view separator);

// The non-empty parts of `text` between `separator`s: "a,,b" -> {"a", "b"}.
std::vector<std::string> split(std::string_view text, char separator);

// `url` with any password replaced by "***" ("postgresql://app:***@db/spendcap", also
// "?password=***"): ledger URLs may carry one, and messages go to terminals and CI logs.
std::string redact_password(std::string url);

// Whether `text` is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool is_valid_utf8(std::string_view text);

// `text` made safe to print to a terminal: control characters (C0, DEL, and C1 written in UTF-8)
// become \n, \t, \e, \xNN or \u{NNNN}, a byte that is not part of valid UTF-8 becomes \xNN,
// and a backslash is doubled. Everything that reaches a screen from a name, a reason or a command
// that another user wrote goes through here, so an ESC sequence cannot rewrite someone's screen.
std::string escape_for_terminal(std::string_view text);

// At most `max_chars` characters of `text` with every control character (a tab becomes a space)
// and every byte that is not valid UTF-8 dropped: a line another program wrote, kept to be shown
// later (a run's last progress line in the ledger).
std::string printable_excerpt(std::string_view text, std::size_t max_chars);

// Refuses (spendcap::Error, exit 125) a name (--team, --experiment, --project, a tag key) holding
// a control character or bytes that are not UTF-8, naming `flag` and quoting the value (the
// printers escape it).
void require_printable_name(std::string_view value, std::string_view flag);

}  // namespace spendcap
