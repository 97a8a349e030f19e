#include <doctest/doctest.h>

#include <cmath>

#include "spendcap/base/dynamic_library.hpp"
#include "spendcap/base/error.hpp"

namespace spendcap {
namespace {

TEST_CASE("DynamicLibrary: loads a library, resolves each symbol on its own") {
  DynamicLibrary libm("libm.so.6", "maths");
  auto cosine = libm.function<double (*)(double)>("cos");
  bool resolved = cosine != nullptr;
  REQUIRE(resolved);
  CHECK(cosine(0.0) == doctest::Approx(1.0));
  // A symbol the library lacks is nullptr for that one function, not an error.
  bool missing_is_null = libm.function<void (*)()>("spendcap_no_such_function") == nullptr;
  CHECK(missing_is_null);
  DynamicLibrary moved = std::move(libm);
  bool moved_resolves = moved.function<double (*)(double)>("cos") != nullptr;
  CHECK(moved_resolves);
  CHECK(libm.symbol("cos") == nullptr);  // the moved-from handle is empty
}

TEST_CASE("DynamicLibrary: a library that cannot be loaded is an error naming it") {
  try {
    DynamicLibrary missing("/nonexistent/libnvidia-ml.so.1", "NVML");
    FAIL("loaded a library that does not exist");
  } catch (const Error& error) {
    CHECK(error.subject() == "NVML library /nonexistent/libnvidia-ml.so.1");
  }
}

}  // namespace
}  // namespace spendcap
