#include "spendcap/run/input_limits.hpp"

#include "spendcap/base/error.hpp"

namespace spendcap {

namespace {

// Enough of a long value to recognise it, never the whole of it (a refusal is printed, logged).
std::string quoted_start(const std::string& text) {
  constexpr std::size_t kShown = 32;
  if (text.size() <= kShown) return text;
  std::size_t cut = kShown;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "...";
}

const char* const kWhy =
    "every run, a refused one too, keeps it in the shared ledger and sends it in its webhooks";

void require_size(const std::string& flag, const std::string& value, const char* what,
                  std::size_t limit, const char* hint) {
  if (value.size() <= limit) return;
  throw Error(flag + " " + quoted_start(value),
              std::string(what) + " is " + std::to_string(value.size()) +
                  " bytes, over the limit of " + std::to_string(limit) + " bytes (" + kWhy + ")",
              hint);
}

}  // namespace

void require_within_input_limits(const RunRequest& request) {
  const char* name_hint = "use a shorter name";
  require_size("--team", request.team, "the name", kMaxNameBytes, name_hint);
  require_size("--experiment", request.experiment, "the name", kMaxNameBytes, name_hint);
  require_size("--project", request.project, "the name", kMaxNameBytes, name_hint);
  require_size("--job-key", request.job_key, "the job key", kMaxNameBytes, name_hint);
  if (request.tags.size() > kMaxTags) {
    throw Error("--tag",
                std::to_string(request.tags.size()) + " tags, over the limit of " +
                    std::to_string(kMaxTags) + " per run (" + kWhy + ")",
                "keep the tags you report by; put the rest in a file the job writes");
  }
  for (const std::string& tag : request.tags) {
    std::size_t eq = tag.find('=');
    std::string key = tag.substr(0, eq);
    require_size("--tag", key, "its KEY", kMaxTagKeyBytes, "use a shorter key");
    if (eq == std::string::npos) continue;  // not KEY=VALUE: refused as such by the settings
    std::size_t value_bytes = tag.size() - eq - 1;
    if (value_bytes > kMaxTagValueBytes) {
      throw Error("--tag " + quoted_start(tag),
                  "its VALUE is " + std::to_string(value_bytes) + " bytes, over the limit of " +
                      std::to_string(kMaxTagValueBytes) + " bytes (" + kWhy + ")",
                  "tag a short value (an id, or the path of a file that holds the long text)");
    }
  }
}

std::map<std::string, std::string> bounded_tags(std::map<std::string, std::string> tags) {
  for (auto& [key, value] : tags) {
    if (value.size() <= kMaxTagValueBytes) continue;
    std::size_t cut = kMaxTagValueBytes - 3;
    while (cut > 0 && (static_cast<unsigned char>(value[cut]) & 0xC0) == 0x80) --cut;
    value = value.substr(0, cut) + "...";
  }
  return tags;
}

}  // namespace spendcap
