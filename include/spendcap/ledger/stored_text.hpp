// How both ledger stores write a run's structured fields as text (JSON) and read them back: tags,
// the command's argv, a budget's member groups. One reading for SQLite and PostgreSQL alike.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "spendcap/base/json_text.hpp"
#include "spendcap/policy/policy.hpp"

namespace spendcap {

std::string json_of(const auto& value) {
  return dump_json(nlohmann::json(value));
}

// Tags as written by json_of: an object of strings (anything else, written by hand, is dropped).
std::map<std::string, std::string> tags_of_json(const std::string& text);

// The command's argv as written by json_of; words that are not strings are dropped.
std::vector<std::string> command_of_json(const std::string& text);

// A budget's member groups (none stored: anyone). A list that cannot be read admits nobody but the
// ledger's owner: membership fails closed.
std::vector<std::string> member_groups_of_json(const std::optional<std::string>& text);

// A run's pricing in the runs.pricing column (v11): 'on-demand', 'spot' or 'reserved'; NULL (none)
// is unknown, for runs recorded before the column. Text that is none of these reads as unknown.
std::optional<std::string> pricing_column(const std::optional<Pricing>& pricing);
std::optional<Pricing> pricing_of_column(const std::optional<std::string>& text);

// A run's webhooks (ledger.hpp, RunWebhook) as a JSON array of {destination, format, secret_env}
// objects, and back (entries that cannot be read are dropped).
struct RunWebhook;
std::string webhooks_json(const std::vector<RunWebhook>& hooks);
std::vector<RunWebhook> webhooks_of_json(const std::string& text);

}  // namespace spendcap
