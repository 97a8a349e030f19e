// Small text helpers shared by the policy, the CLI and the messages.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace spendcap {

// A random (version 4) UUID, lowercase: run ids and webhook event ids.
std::string random_uuid();

// "2026-12-01T10:07:03Z": Unix seconds as an RFC 3339 / ISO 8601 UTC time, to the second.
std::string rfc3339_utc(double unix_seconds);

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
