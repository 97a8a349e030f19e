// The unit tests' main: doctest's, except that without a PostgreSQL server to test against
// (SPENDCAP_TEST_PG_URL, set by scripts/pg-test-server.sh env; scripts/test.sh always starts one)
// the PostgreSQL cases (those with "postgresql" in their names) do not run, and CTest reports each
// of them "Skipped": a run that selects one prints the skip marker (test_support.hpp). A run that
// names a case (as CTest's does) and finds none fails: it would otherwise pass having run nothing.
#define DOCTEST_CONFIG_IMPLEMENT
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <doctest/doctest.h>

namespace {

// How many cases the run selected (doctest's own count, read when the run ends).
int selected_cases = -1;

struct SelectedCases : doctest::IReporter {
  explicit SelectedCases(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override {
    selected_cases = static_cast<int>(stats.numTestCasesPassingFilters);
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("selected_cases", 1, SelectedCases);

bool names_a_case(std::string_view arg) {
  for (std::string_view flag : {"--test-case=", "-tc=", "--dt-test-case=", "--dt-tc="}) {
    if (arg.starts_with(flag)) return true;
  }
  return false;
}

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
  bool listing = false, postgresql_selected = false, named = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    listing =
        listing || arg.starts_with("--list") || arg.starts_with("-ltc") || arg.starts_with("-lts");
    postgresql_selected = postgresql_selected || selects_postgresql(arg);
    named = named || names_a_case(arg);
  }
  bool pg_skipped = false;
  if (!listing && !std::getenv("SPENDCAP_TEST_PG_URL")) {
    context.addFilter("test-case-exclude", "*postgresql*");
    const char* why =
        "PostgreSQL cases skipped: SPENDCAP_TEST_PG_URL is not set (start a server with "
        "scripts/pg-test-server.sh start; eval \"$(scripts/pg-test-server.sh env)\")";
    std::fprintf(stderr, "%s: %s\n", argv[0], why);
    if (postgresql_selected) std::printf("SPENDCAP_SKIPPED: %s\n", why);
    pg_skipped = postgresql_selected;
  }
  context.applyCommandLine(argc, argv);
  int status = context.run();
  if (status == 0 && named && !listing && !pg_skipped && selected_cases == 0) {
    std::fprintf(stderr, "%s: no test case matches the name given: nothing was tested\n", argv[0]);
    return 1;
  }
  return status;
}
