// Fuzzes the policy reader: any bytes as a policy file. A policy that parses or is refused with
// spendcap's own Error is fine; any other exception, a crash or a sanitizer report is a finding.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "spendcap/base/error.hpp"
#include "spendcap/policy/keys.hpp"
#include "spendcap/policy/policy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  nlohmann::json document = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) return 0;
  try {
    spendcap::keys_without_effect(document);
    spendcap::parse_policy(document, "fuzz.json");
  } catch (const spendcap::Error&) {
  }
  return 0;
}
