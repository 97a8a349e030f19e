#include "spendcap/notify/payload.hpp"

#include <sys/random.h>
#include <sys/time.h>

#include <cstdio>
#include <ctime>

#include "spendcap/base/command_redaction.hpp"
#include "spendcap/base/json_text.hpp"
#include "spendcap/base/money.hpp"
#include "spendcap/base/text.hpp"

namespace spendcap {

double unix_now() {
  timeval tv{};
  ::gettimeofday(&tv, nullptr);
  return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6;
}

std::string new_event_id() {
  return random_uuid();
}

nlohmann::json event_payload(const RunFacts& facts, const RunEvent& event,
                             const std::string& event_id, double at) {
  nlohmann::json p;
  p["event_id"] = event_id;
  p["event"] = event.event;
  p["at"] = rfc3339_utc(at);
  p["run_id"] = facts.id;
  p["team"] = facts.team;
  p["experiment"] = facts.experiment;
  p["project"] = facts.project;
  p["user"] = facts.user;
  p["tags"] = facts.tags;
  if (event.tracker && !facts.tags.count("tracker")) p["tags"]["tracker"] = *event.tracker;
  p["host"] = facts.host;
  p["command"] = stored_command(facts.command);  // the outbox keeps bodies in the ledger
  p["reason"] = event.reason;
  if (!event.scope.empty()) p["scope"] = event.scope;
  if (!event.message.empty()) p["message"] = event.message;
  if (event.spend) p["spend"] = to_decimal(*event.spend);
  if (facts.budget) p["budget"] = to_decimal(*facts.budget);
  if (event.scope_spend) p["scope_spend"] = to_decimal(*event.scope_spend);
  if (event.scope_budget) p["scope_budget"] = to_decimal(*event.scope_budget);
  p["currency"] = facts.currency;
  p["burn_rate_per_hour"] = to_decimal(facts.rate_per_hour);
  if (event.gpu_utilisation) p["gpu_utilisation"] = *event.gpu_utilisation;
  if (facts.started_at) p["started_at"] = rfc3339_utc(*facts.started_at);
  if (event.ended) p["ended_at"] = rfc3339_utc(at);
  if (event.exit_code) p["exit_code"] = *event.exit_code;
  if (event.command_exit_code) p["command_exit_code"] = *event.command_exit_code;
  if (event.checkpoint) p["checkpoint"] = *event.checkpoint;
  if (event.last_step) p["last_step"] = *event.last_step;
  if (event.total_steps) p["total_steps"] = *event.total_steps;
  return p;
}

std::string slack_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '&') {
      out += "&amp;";
    } else if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

// Slack's limits: a header's text 150 characters, a field's 2000, the fallback text 40000 (cut
// well below). Cut on a UTF-8 boundary, and before escaping so that no entity is cut in half.
std::string cut(const std::string& text, size_t limit) {
  if (text.size() <= limit) return text;
  size_t end = limit - 3;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end) + "...";
}

nlohmann::json plain(const std::string& text, size_t limit = 1900) {
  return {{"type", "plain_text"}, {"text", slack_escape(cut(text, limit))}, {"emoji", false}};
}

}  // namespace

nlohmann::json slack_payload(const nlohmann::json& p) {
  auto field = [&p](const char* name) {
    auto it = p.find(name);
    if (it == p.end()) return std::string();
    if (it->is_string()) return it->get<std::string>();
    if (it->is_number()) return it->dump();
    return std::string();
  };
  std::string currency = field("currency");
  std::string run = field("run_id");
  std::string event = field("event");
  std::string scope = field("scope");
  std::string reason = field("reason");
  std::string command;
  if (auto it = p.find("command"); it != p.end() && it->is_array()) {
    for (const auto& word : *it) {
      if (!word.is_string()) continue;
      command += (command.empty() ? "" : " ") + word.get<std::string>();
    }
  }
  std::string tags;
  if (auto it = p.find("tags"); it != p.end() && it->is_object()) {
    for (const auto& [key, value] : it->items()) {
      if (!value.is_string()) continue;
      tags += (tags.empty() ? "" : ", ") + key + "=" + value.get<std::string>();
    }
  }
  // Spend of which budget: the scope that tripped or warned names it; the run's own budget is
  // the one figure the event carries.
  // Money as the terminal prints it ($0.20, $0.0042, 12.50 EUR), not the payload's micro-units.
  auto money = [&](const std::string& decimal) {
    auto amount = parse_money(decimal);
    return amount ? format_money(*amount, currency) : decimal + " " + currency;
  };
  std::string spend;
  if (!field("spend").empty()) {
    spend = money(field("spend"));
    if ((scope.empty() || scope == "run") && !field("budget").empty()) {
      spend += " of the run budget " + money(field("budget"));
    } else if (!scope.empty() && !field("scope_spend").empty()) {
      // A shared scope's warning: the scope's figures first, then this run's share.
      spend = money(field("scope_spend")) + " of the " + scope + " budget " +
              money(field("scope_budget")) + " (this run " + spend + ")";
    } else if (!scope.empty()) {
      spend += " (budget " + scope + ")";
    }
  }
  // The reason once: a message that already says it (a refusal: "refused: stop order on ...")
  // stands alone.
  std::string message = field("message");
  std::string why = reason;
  if (!message.empty() && message != reason) {
    why = !reason.empty() && message.find(reason) != std::string::npos
              ? message
              : reason + (reason.empty() ? "" : ": ") + message;
  }
  // The header and the fallback name the reason unless it only repeats the event
  // ("stop-order: stop-order").
  std::string headline = reason == event ? "" : reason;
  std::string where = "host " + field("host") + ", run " + run;

  // Every text a user controls (team, experiment, project, user, tags, command, reason, message,
  // host) is escaped (& < >) and, in blocks, sits in plain_text objects: mrkdwn has no escape for
  // * _ ~ `, so none of it is ever parsed as markup, a mention or a link.
  std::string title = "spendcap: run " + run.substr(0, 8) + " " + event;
  std::string text = title;
  std::string who;
  if (!field("team").empty()) who += "team " + field("team");
  if (!field("experiment").empty()) {
    who += (who.empty() ? "" : ", ") + std::string("experiment ") + field("experiment");
  }
  if (!who.empty()) text += " (" + who + ")";
  if (!headline.empty()) text += ": " + headline;
  if (!spend.empty()) text += "; spent " + spend;
  if (!field("host").empty()) text += "; host " + field("host");
  if (!field("user").empty()) text += "; user " + field("user");

  nlohmann::json fields = nlohmann::json::array();
  auto add = [&fields](const std::string& name, const std::string& value) {
    if (!value.empty() && fields.size() < 10) fields.push_back(plain(name + ": " + value));
  };
  add("User", field("user"));
  add("Team", field("team"));
  add("Experiment", field("experiment"));
  add("Project", field("project"));
  add("Spend", spend);
  add("Rate", field("burn_rate_per_hour").empty() ? "" : money(field("burn_rate_per_hour")) + "/h");
  add("Why", why);
  add("Where", where);
  add("Tags", tags);
  add("Exit", field("exit_code").empty() || field("command_exit_code").empty()
                  ? field("exit_code")
                  : field("exit_code") + " (the command's: " + field("command_exit_code") + ")");
  nlohmann::json blocks = nlohmann::json::array();
  blocks.push_back({{"type", "header"},
                    {"text", plain(title + (headline.empty() ? "" : ": " + headline), 140)}});
  if (!fields.empty()) blocks.push_back({{"type", "section"}, {"fields", fields}});
  if (!command.empty()) {
    blocks.push_back(
        {{"type", "context"}, {"elements", nlohmann::json::array({plain("command: " + command)})}});
  }
  // The fallback `text` (notifications, clients without blocks): escaped, and mrkdwn off for it.
  return nlohmann::json{
      {"text", slack_escape(cut(text, 3000))}, {"mrkdwn", false}, {"blocks", blocks}};
}

std::string event_body(const std::string& format, const nlohmann::json& payload) {
  return dump_json(format == "slack" ? slack_payload(payload) : payload);
}

}  // namespace spendcap
