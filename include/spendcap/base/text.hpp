// Small text helpers shared by the policy, the CLI and the messages.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace spendcap {

// "a, b, c" from {"a", "b", "c"} and ", ".
std::string join(const std::vector<std::string>& items, std::string_view separator);

// The non-empty parts of `text` between `separator`s: "a,,b" -> {"a", "b"}.
std::vector<std::string> split(std::string_view text, char separator);

// `url` with any password replaced by "***" ("postgresql://app:***@db/spendcap", also
// "?password=***"): ledger URLs may carry one, and messages go to terminals and CI logs.
std::string redact_password(std::string url);

}  // namespace spendcap
