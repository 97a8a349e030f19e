#include "spendcap/ledger/stored_text.hpp"

#include "spendcap/ledger/ledger.hpp"

namespace spendcap {

std::map<std::string, std::string> tags_of_json(const std::string& text) {
  std::map<std::string, std::string> tags;
  auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_object()) {
    for (const auto& [key, value] : json.items()) {
      if (value.is_string()) tags[key] = value.get<std::string>();
    }
  }
  return tags;
}

std::vector<std::string> command_of_json(const std::string& text) {
  std::vector<std::string> command;
  auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_array()) {
    for (const auto& word : json) {
      if (word.is_string()) command.push_back(word.get<std::string>());
    }
  }
  return command;
}

std::vector<std::string> member_groups_of_json(const std::optional<std::string>& text) {
  if (!text) return {};
  auto json = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  std::vector<std::string> groups = command_of_json(*text);
  if (!json.is_array() || groups.size() != json.size() || groups.empty()) {
    return {"(unreadable member list)"};
  }
  return groups;
}

std::string webhooks_json(const std::vector<RunWebhook>& hooks) {
  nlohmann::json list = nlohmann::json::array();
  for (const RunWebhook& hook : hooks) {
    list.push_back({{"destination", hook.destination},
                    {"format", hook.format},
                    {"secret_env", hook.secret_env}});
  }
  return dump_json(list);
}

std::vector<RunWebhook> webhooks_of_json(const std::string& text) {
  std::vector<RunWebhook> hooks;
  nlohmann::json list = nlohmann::json::parse(text, nullptr, false);
  if (!list.is_array()) return hooks;
  for (const nlohmann::json& item : list) {
    if (!item.is_object()) continue;
    auto field = [&item](const char* key) {
      auto found = item.find(key);
      return found != item.end() && found->is_string() ? found->get<std::string>() : std::string();
    };
    if (field("destination").empty()) continue;
    hooks.push_back({field("destination"), field("format"), field("secret_env")});
  }
  return hooks;
}

}  // namespace spendcap

namespace spendcap {

std::optional<std::string> pricing_column(const std::optional<Pricing>& pricing) {
  if (!pricing) return std::nullopt;
  return to_string(*pricing, PricingSpelling::display);
}

std::optional<Pricing> pricing_of_column(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  return parse_pricing(*text);
}

}  // namespace spendcap
