#include "spendcap/notify/payload.hpp"

#include <sys/random.h>
#include <sys/time.h>

#include <cstdio>
#include <ctime>

#include "spendcap/base/json_text.hpp"
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
  p["run_id"] = facts.run_id;
  p["team"] = facts.team;
  p["experiment"] = facts.experiment;
  p["project"] = facts.project;
  p["user"] = facts.user;
  p["tags"] = facts.tags;
  p["host"] = facts.host;
  p["command"] = facts.command;
  p["reason"] = event.reason;
  if (!event.scope.empty()) p["scope"] = event.scope;
  if (!event.message.empty()) p["message"] = event.message;
  if (event.spend) p["spend"] = to_decimal(*event.spend);
  if (facts.budget) p["budget"] = to_decimal(*facts.budget);
  p["currency"] = facts.currency;
  p["burn_rate_per_hour"] = to_decimal(facts.rate_per_hour);
  if (event.gpu_utilisation) p["gpu_utilisation"] = *event.gpu_utilisation;
  if (facts.started_at) p["started_at"] = rfc3339_utc(*facts.started_at);
  if (event.ended) p["ended_at"] = rfc3339_utc(at);
  if (event.exit_code) p["exit_code"] = *event.exit_code;
  return p;
}

nlohmann::json slack_payload(const nlohmann::json& p) {
  auto field = [&p](const char* name) {
    auto it = p.find(name);
    return it != p.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  std::string text = "spendcap: run " + field("run_id").substr(0, 8) + " " + field("event");
  std::string who;
  if (!field("team").empty()) who += "team " + field("team");
  if (!field("experiment").empty()) {
    who += (who.empty() ? "" : ", ") + std::string("experiment ") + field("experiment");
  }
  if (!who.empty()) text += " (" + who + ")";
  if (!field("reason").empty()) text += ": " + field("reason");
  if (!field("spend").empty()) {
    text += "; spent " + field("spend") + " " + field("currency");
    if (!field("budget").empty()) text += " of " + field("budget") + " " + field("currency");
  }
  if (!field("host").empty()) text += "; host " + field("host");
  return nlohmann::json{{"text", text}};
}

std::string event_body(const std::string& format, const nlohmann::json& payload) {
  return dump_json(format == "slack" ? slack_payload(payload) : payload);
}

}  // namespace spendcap
