// Policy errors that teach (issue 15, item 10): a duplicate key does not hide the file's other
// errors, and a comment is answered with the way to write one.
#include <fstream>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "spendcap/policy/policy.hpp"
#include "test_support.hpp"

namespace spendcap {
namespace {

std::vector<std::string> errors_of_file(const std::string& text) {
  testing::TempDir dir;
  std::string path = dir.file("policy.json");
  std::ofstream(path) << text;
  try {
    read_policy_file(path);
  } catch (const PolicyError& error) {
    return error.errors();
  }
  return {};
}

bool has(const std::vector<std::string>& errors, const std::string& needle) {
  for (const std::string& error : errors) {
    if (error.find(needle) != std::string::npos) return true;
  }
  return false;
}

TEST_CASE("policy file: a duplicate key and every other error are said together") {
  auto errors = errors_of_file(
      R"({"mode": "enforce", "mode": "warn", "defaults": {"grace": "soon"}, "colour": 1})");
  CAPTURE(errors.size());
  CHECK(has(errors, "/mode: duplicate key"));
  CHECK(has(errors, "/defaults/grace: must be a duration"));
  CHECK(has(errors, "/colour: unknown key"));
  // The negative control: without the duplicate the file reads, and its errors come later.
  CHECK(errors_of_file(R"({"mode": "warn", "defaults": {"grace": "soon"}})").empty());
}

TEST_CASE("policy file: a comment is answered with \"description\"") {
  for (const char* text :
       {"{\n  // the lab's policy\n  \"mode\": \"warn\"\n}", "{\"mode\": \"warn\" /* why */}"}) {
    CAPTURE(text);
    auto errors = errors_of_file(text);
    REQUIRE(errors.size() == 1);
    CHECK(has(errors, "comments are not allowed in JSON: use \"description\""));
  }
  auto broken = errors_of_file("{\"mode\": }");
  REQUIRE(broken.size() == 1);
  CHECK_FALSE(has(broken, "comments"));
}

}  // namespace
}  // namespace spendcap
