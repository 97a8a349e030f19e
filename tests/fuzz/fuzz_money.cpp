// Fuzzes money parsing ("12.50", "0.000001"): any text either parses or is refused; a parsed
// amount formats and survives the checked arithmetic without overflow reports.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "spendcap/base/money.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto parsed = spendcap::parse_money(text)) {
    (void)spendcap::format_money(*parsed, "USD");
    (void)spendcap::cost_of(*parsed, spendcap::Nanos{3'600'000'000'000});
  }
  return 0;
}
