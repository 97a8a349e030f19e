// The input-bound hint: when the run's GPUs were mostly idle, where the tree's time went. Sampled
// with the GPUs, from the tree's own processes (so it reads the same with or without a cgroup):
// their CPU time (utime + stime of /proc/PID/stat), how many were runnable (state R), and how many
// were blocked reading (state D, or asleep in a read or receive system call per /proc/PID/syscall).
// Kernels without task delay accounting (kernel.task_delayacct = 0, the common case) give no I/O
// wait time per process; blocked reads are what can be seen, and the hint says so.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace spendcap {

// What a run's processes did over the run, averaged over the samples.
struct InputActivity {
  double seconds = 0;         // sampled time
  double cpu_seconds = 0;     // the tree's CPU time over it
  double cores = 1;           // CPUs the run may use (spendcap's affinity)
  double running = 0;         // mean runnable processes
  double reading = 0;         // mean processes blocked reading
  bool reads_visible = true;  // /proc/PID/syscall was readable
  double busy_cores() const { return seconds > 0 ? cpu_seconds / seconds : 0; }
};

struct InputHint {
  std::string kind;  // "cpu-bound", "io-bound" or "neither"
  std::string text;  // the line for people
};

// Utilisation under this is "well below 90%": the hint is given.
inline constexpr double kInputHintBelow = 0.8;

// The hint for a run whose GPUs were busy `mean_utilisation` (0..1) of the time; none when they
// were busy enough. Pure.
std::optional<InputHint> input_hint(double mean_utilisation, const InputActivity& activity);

// Samples the tree's processes (reads /proc).
class InputWatch {
 public:
  InputWatch();
  void sample(double t, const std::vector<pid_t>& tree);
  const InputActivity& activity() const { return activity_; }

 private:
  InputActivity activity_;
  std::map<pid_t, double> cpu_;  // each process's CPU seconds at the last sample
  std::optional<double> last_t_;
  double running_sum_ = 0, reading_sum_ = 0;
  int samples_ = 0;
  long ticks_ = 100;
};

}  // namespace spendcap
