#include "spendcap/notify/payload.hpp"

#include <sys/random.h>
#include <sys/time.h>

#include <cstdio>
#include <ctime>

#include "spendcap/base/json_text.hpp"

namespace spendcap {

double unix_now() {
  timeval tv{};
  ::gettimeofday(&tv, nullptr);
  return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6;
}

std::string new_event_id() {
  unsigned char bytes[16] = {};
  for (size_t got = 0; got < sizeof bytes;) {
    ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  bytes[6] = static_cast<unsigned char>((bytes[6] & 0x0f) | 0x40);
  bytes[8] = static_cast<unsigned char>((bytes[8] & 0x3f) | 0x80);
  char text[37];
  std::snprintf(text, sizeof text,
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", bytes[0],
                bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8],
                bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]);
  return text;
}

std::string rfc3339_utc(double unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
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
