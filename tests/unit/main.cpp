// The unit tests' main: doctest's, except that without a PostgreSQL server to test against
// (SPENDCAP_TEST_PG_URL, set by scripts/pg-test-server.sh env; scripts/test.sh always starts one)
// the PostgreSQL cases (those with "postgresql" in their names) do not run, and CTest reports each
// of them "Skipped": a run that selects one prints the skip marker (test_support.hpp).
#define DOCTEST_CONFIG_IMPLEMENT
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <doctest/doctest.h>

namespace {

// Whether `arg` selects test cases by a name with "postgresql" in it (doctest's filters are
// case-insensitive), as CTest's `--test-case=NAME` for each discovered case does.
bool selects_postgresql(std::string_view arg) {
  for (std::string_view flag : {"--test-case=", "-tc=", "--dt-test-case=", "--dt-tc="}) {
    if (!arg.starts_with(flag)) continue;
    std::string value(arg.substr(flag.size()));
    for (char& c : value) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return value.find("postgresql") != std::string::npos;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  doctest::Context context;
  // Listing (CTest's discovery, at build time) names every case, so that CTest runs the
  // PostgreSQL ones wherever a server is set when the tests run.
  bool listing = false, postgresql_selected = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    listing =
        listing || arg.starts_with("--list") || arg.starts_with("-ltc") || arg.starts_with("-lts");
    postgresql_selected = postgresql_selected || selects_postgresql(arg);
  }
  if (!listing && !std::getenv("SPENDCAP_TEST_PG_URL")) {
    context.addFilter("test-case-exclude", "*postgresql*");
    const char* why =
        "PostgreSQL cases skipped: SPENDCAP_TEST_PG_URL is not set (start a server with "
        "scripts/pg-test-server.sh start; eval \"$(scripts/pg-test-server.sh env)\")";
    std::fprintf(stderr, "%s: %s\n", argv[0], why);
    if (postgresql_selected) std::printf("SPENDCAP_SKIPPED: %s\n", why);
  }
  context.applyCommandLine(argc, argv);
  return context.run();
}
