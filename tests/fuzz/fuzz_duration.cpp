// Fuzzes duration parsing ("90s", "1h30m", "250ms"): any text either parses to a non-negative
// duration or is refused; formatting a parsed one never crashes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "spendcap/base/duration.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto parsed = spendcap::parse_duration(text)) {
    if (parsed->count() < 0) std::abort();
    (void)spendcap::format_duration(*parsed);
  }
  return 0;
}
