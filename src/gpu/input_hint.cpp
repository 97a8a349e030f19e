#include "spendcap/gpu/input_hint.hpp"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace spendcap {

namespace {

std::string fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The read and receive system calls: a process asleep in one waits for its input.
bool is_read_syscall(long number) {
  switch (number) {
    case SYS_read:
    case SYS_readv:
    case SYS_pread64:
    case SYS_preadv:
    case SYS_recvfrom:
    case SYS_recvmsg:
    case SYS_io_getevents:
      return true;
    default:
      return false;
  }
}

}  // namespace

std::optional<InputHint> input_hint(double mean_utilisation, const InputActivity& a) {
  if (mean_utilisation >= kInputHintBelow || a.seconds <= 0) return std::nullopt;
  std::string head = "input-bound hint: GPU utilisation " + fixed(mean_utilisation * 100, 0) +
                     "%, well below 90%; ";
  std::string cpu = fixed(a.busy_cores(), 2) + " of " + fixed(a.cores, 0) + " CPUs busy, " +
                    fixed(a.running, 1) + " processes runnable";
  // Saturated: the tree kept the CPUs busy, or had at least as many runnable processes as CPUs
  // (on a shared machine they wait for a CPU rather than use it).
  if (a.busy_cores() >= 0.6 * a.cores || a.running >= 0.75 * a.cores) {
    return InputHint{"cpu-bound",
                     head + "the tree's CPUs were saturated (" + cpu +
                         " on average): preprocessing / augmentation is the bottleneck "
                         "(more loader workers or CPUs, or move it to the GPU)"};
  }
  std::string unseen = a.reads_visible ? "" : "; blocked reads cannot be seen here";
  std::string wait_note =
      "; I/O wait time itself cannot be seen (no task delay accounting), blocked reads can";
  if (a.reading >= 0.5 && a.busy_cores() < 0.3 * a.cores) {
    return InputHint{"io-bound", head + "the tree mostly waited on I/O (" + fixed(a.reading, 1) +
                                     " processes blocked reading, " + cpu +
                                     " on average): the disk or network feed is the bottleneck" +
                                     wait_note};
  }
  return InputHint{"neither", head + "neither CPUs nor reads were the limit (" + cpu + ", " +
                                  fixed(a.reading, 1) +
                                  " blocked reading on average): look at synchronisation or small "
                                  "batches" +
                                  (a.reads_visible ? wait_note : unseen)};
}

InputWatch::InputWatch() {
  ticks_ = ::sysconf(_SC_CLK_TCK);
  if (ticks_ <= 0) ticks_ = 100;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) {
    activity_.cores = CPU_COUNT(&set);
  }
}

void InputWatch::sample(double t, const std::vector<pid_t>& tree) {
  int running = 0, reading = 0;
  double cpu_delta = 0;
  std::map<pid_t, double> cpu;
  for (pid_t pid : tree) {
    std::string stat = read_all("/proc/" + std::to_string(pid) + "/stat");
    std::size_t close = stat.rfind(')');
    if (close == std::string::npos || close + 2 >= stat.size()) continue;
    char state = stat[close + 2];
    // Fields after comm, state being field 3: utime is 14, stime 15.
    std::istringstream rest(stat.substr(close + 2));
    std::string field;
    double ticks = 0;
    for (int n = 3; n <= 15 && rest >> field; ++n) {
      if (n == 14 || n == 15) ticks += std::strtod(field.c_str(), nullptr);
    }
    double seconds = ticks / static_cast<double>(ticks_);
    cpu[pid] = seconds;
    auto last = cpu_.find(pid);
    // A process first seen now: its CPU time since it started counts when the run was sampled
    // before (it started in between), not at the first sample.
    if (last != cpu_.end()) {
      cpu_delta += seconds - last->second;
    } else if (last_t_) {
      cpu_delta += seconds;
    }
    if (state == 'R') ++running;
    if (state == 'D') {
      ++reading;
    } else if (state == 'S') {
      std::string syscall = read_all("/proc/" + std::to_string(pid) + "/syscall");
      if (syscall.empty()) {
        activity_.reads_visible = false;
      } else if (syscall[0] >= '0' && syscall[0] <= '9' &&
                 is_read_syscall(std::strtol(syscall.c_str(), nullptr, 10))) {
        ++reading;
      }
    }
  }
  cpu_ = std::move(cpu);
  if (last_t_) {
    activity_.seconds += t - *last_t_;
    activity_.cpu_seconds += cpu_delta;
    running_sum_ += running;
    reading_sum_ += reading;
    ++samples_;
    activity_.running = running_sum_ / samples_;
    activity_.reading = reading_sum_ / samples_;
  }
  last_t_ = t;
}

}  // namespace spendcap
