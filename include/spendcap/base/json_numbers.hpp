// JSON numbers as people write them: nlohmann writes a double in its shortest round-trip form,
// which for small and large values is an exponent (4.617e-05). plain_json_numbers rewrites each
// such number outside strings to the same digits with the point moved (0.00004617): the same
// value when parsed, exactly, since no digit changes. Exponents beyond +-30 are left as they are
// (no money or time is that small or large; 1e300 would be 300 zeros).
#pragma once

#include <string>

namespace spendcap {

std::string plain_json_numbers(const std::string& json);

}  // namespace spendcap
