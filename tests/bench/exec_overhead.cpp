// Exec overhead: the wall time of a whole command, fork to reaped, for `true`, `timeout 100 true`
// and `spendcap run --rate 1 --budget 100 -- true`, run interleaved (A B C A B C ...) so that drift
// of a shared machine hits all three alike. Prints the median and the quartiles of each, in ms.
//
// Usage: exec_overhead SPENDCAP [RUNS]
// The spendcap runs use a throwaway ledger (XDG_DATA_HOME in a temporary directory).
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

extern char** environ;

namespace {

double run_once(const std::vector<std::string>& command) {
  std::vector<char*> argv;
  for (const std::string& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", 1, 0);  // O_WRONLY
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", 1, 0);
  auto start = std::chrono::steady_clock::now();
  pid_t pid;
  if (posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ) != 0) {
    std::perror(argv[0]);
    std::exit(1);
  }
  int status;
  waitpid(pid, &status, 0);
  auto end = std::chrono::steady_clock::now();
  posix_spawn_file_actions_destroy(&actions);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "%s failed (status %d)\n", argv[0], status);
    std::exit(1);
  }
  return std::chrono::duration<double, std::milli>(end - start).count();
}

double quantile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  return values[static_cast<size_t>(q * (values.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: exec_overhead SPENDCAP [RUNS]\n");
    return 2;
  }
  int runs = argc > 2 ? std::atoi(argv[2]) : 300;
  char dir[] = "/tmp/spendcap-bench-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  setenv("XDG_DATA_HOME", dir, 1);
  setenv("XDG_STATE_HOME", dir, 1);
  setenv("XDG_CONFIG_HOME", dir, 1);
  unsetenv("SPENDCAP_POLICY");

  struct Candidate {
    const char* name;
    std::vector<std::string> command;
    std::vector<double> ms;
  };
  std::vector<Candidate> candidates = {
      {"true", {"true"}, {}},
      {"timeout 100 true", {"timeout", "100", "true"}, {}},
      {"spendcap run --rate 1 --budget 100 -- true",
       {argv[1], "run", "--quiet", "--rate", "1", "--budget", "100", "--", "true"},
       {}},
  };
  for (auto& candidate : candidates) run_once(candidate.command);  // warm caches and the ledger
  for (int i = 0; i < runs; ++i) {
    for (auto& candidate : candidates) candidate.ms.push_back(run_once(candidate.command));
  }
  std::printf("| command | median ms | p25 ms | p75 ms |\n|---|---|---|---|\n");
  for (const auto& candidate : candidates) {
    std::printf("| `%s` | %.2f | %.2f | %.2f |\n", candidate.name, quantile(candidate.ms, 0.5),
                quantile(candidate.ms, 0.25), quantile(candidate.ms, 0.75));
  }
  double spendcap = quantile(candidates[2].ms, 0.5), timeout = quantile(candidates[1].ms, 0.5);
  std::printf("\nspendcap - timeout (medians): %.2f ms over %d interleaved runs\n",
              spendcap - timeout, runs);
  std::string cleanup = std::string("rm -rf ") + dir;
  return std::system(cleanup.c_str()) == 0 ? 0 : 1;
}
