// The unit tests' main: doctest's, except that without a PostgreSQL server to test against
// (SPENDCAP_TEST_PG_URL, set by scripts/pg-test-server.sh env; scripts/test.sh always starts one)
// the PostgreSQL cases are skipped, saying so.
#define DOCTEST_CONFIG_IMPLEMENT
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <doctest/doctest.h>

int main(int argc, char** argv) {
  doctest::Context context;
  // Listing (CTest's discovery, at build time) names every case, so that CTest runs the
  // PostgreSQL ones wherever a server is set when the tests run.
  bool listing = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    listing =
        listing || arg.starts_with("--list") || arg.starts_with("-ltc") || arg.starts_with("-lts");
  }
  if (!listing && !std::getenv("SPENDCAP_TEST_PG_URL")) {
    context.addFilter("test-case-exclude", "*postgresql*");
    std::fprintf(
        stderr,
        "spendcap_unit: PostgreSQL cases skipped: SPENDCAP_TEST_PG_URL is not set (start "
        "a server with scripts/pg-test-server.sh start; eval \"$(scripts/pg-test-server.sh "
        "env)\")\n");
  }
  context.applyCommandLine(argc, argv);
  return context.run();
}
