// base/json_numbers.hpp: exponents rewritten as plain decimals, the value unchanged.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "spendcap/base/json_numbers.hpp"

namespace spendcap {

TEST_CASE("JSON numbers without exponents, parsed back to the same values") {
  CHECK(plain_json_numbers(R"({"a":4.617e-05})") == R"({"a":0.00004617})");
  CHECK(plain_json_numbers(R"([2.2e-05,-1.5e-07,1e+21,3.25,12,"x4e-05"])") ==
        R"([0.000022,-0.00000015,1000000000000000000000,3.25,12,"x4e-05"])");
  CHECK(plain_json_numbers(R"({"s":"a\"1e-05","n":1e-300})") == R"({"s":"a\"1e-05","n":1e-300})");
  for (double value : {4.617e-05, 2.2e-05, 1.0 / 3e7, 7.5e-11, 123456789.125, 1e21, -3.3e-9}) {
    nlohmann::json j = {{"v", value}};
    std::string plain = plain_json_numbers(j.dump());
    CHECK(plain.find('e') == std::string::npos);
    CHECK(nlohmann::json::parse(plain)["v"].get<double>() == value);  // exactly
  }
}

}  // namespace spendcap
