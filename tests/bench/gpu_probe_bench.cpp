// GPU probe cost: CPU time per poll of GpuAccount (the NVML calls: per-process and device samples
// and the energy counter every poll, the process lists every kProcessListEvery polls) with 8
// devices and 64 tree processes, through the fake NVML loaded by the real dlopen path. The
// sampler polls every 200 ms: the cost per second of a run is five polls.
//   gpu_probe_bench [SAMPLES]
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "spendcap/gpu/account.hpp"

namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  int samples = argc > 1 ? std::atoi(argv[1]) : 2000;
  constexpr int kDevices = 8, kProcesses = 64;
  std::vector<pid_t> tree;
  for (int i = 0; i < kProcesses; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      pause();
      _exit(0);
    }
    tree.push_back(pid);
  }
  char dir_template[] = "/tmp/gpu_probe_bench.XXXXXX";
  std::string dir = mkdtemp(dir_template);
  std::string scenario = dir + "/scenario.json";
  {
    std::ofstream out(scenario);
    out << "{\"devices\": [";
    for (int d = 0; d < kDevices; ++d) {
      out << (d ? "," : "") << "{\"pids\": [";
      for (int p = 0; p < kProcesses / kDevices; ++p) {
        out << (p ? "," : "") << tree[d * (kProcesses / kDevices) + p];
      }
      out << "], \"segments\": [{\"util\": 70, \"power_w\": 300}]}";
    }
    out << "]}";
  }
  setenv("FAKE_NVML_SCENARIO", scenario.c_str(), 1);
  setenv("SPENDCAP_NVML_LIBRARY", SPENDCAP_FAKE_NVML, 1);
  std::string why_not;
  auto probe = spendcap::open_nvml_probe(why_not);
  if (!probe) {
    std::fprintf(stderr, "gpu_probe_bench: %s\n", why_not.c_str());
    return 1;
  }
  spendcap::GpuAccount account(*probe, {});
  auto wall_us = [] {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<unsigned long long>(ts.tv_sec) * 1000000ULL +
           static_cast<unsigned long long>(ts.tv_nsec / 1000);
  };
  double start = cpu_seconds();
  unsigned long long wall_start = wall_us();
  for (int i = 0; i < samples; ++i) {
    unsigned long long now = wall_us();
    account.sample(static_cast<double>(now - wall_start) / 1e6, tree, now);
  }
  double per_sample = (cpu_seconds() - start) / samples;
  auto summary = account.summary();
  std::printf(
      "gpu probe: %d devices, %d tree processes: %.3f ms CPU per poll "
      "(%.4f%% of a core at 5 polls a second); %zu devices found\n",
      kDevices, kProcesses, per_sample * 1e3, per_sample * 5 * 100, summary.devices.size());
  for (pid_t pid : tree) kill(pid, SIGKILL);
  for (pid_t pid : tree) waitpid(pid, nullptr, 0);
  std::remove(scenario.c_str());
  rmdir(dir.c_str());
  return 0;
}
