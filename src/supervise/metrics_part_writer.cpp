#include "spendcap/supervise/metrics_part_writer.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

#include "spendcap/base/error.hpp"
#include "spendcap/base/files.hpp"

namespace spendcap {

namespace {

// A message: u32 length, then the op byte and fields, each u32 length + bytes.
void put_field(std::string& out, const std::string& field) {
  std::uint32_t n = static_cast<std::uint32_t>(field.size());
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
  out += field;
}

std::string frame(char op, std::initializer_list<std::string> fields) {
  std::string body(1, op);
  for (const std::string& field : fields) put_field(body, field);
  std::string out;
  put_field(out, body);
  return out;
}

bool read_exactly(int fd, char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::read(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool send_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::send(fd, text.data() + done, text.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Why `dir` is not the runner's metrics directory, "" when it is.
std::string unusable(const std::string& dir, gid_t group) {
  struct stat status {};
  if (::stat(dir.c_str(), &status) != 0) return errno_text(errno);
  if (!S_ISDIR(status.st_mode)) return "not a directory";
  if (status.st_mode & S_IWOTH) return "everyone may write it";
  if (status.st_gid != group) return "not of the runner's group (root:spendcap 2770)";
  if (status.st_uid != 0 && status.st_uid != ::geteuid()) return "not owned by root";
  if (::access(dir.c_str(), W_OK | X_OK) != 0 &&
      ::faccessat(AT_FDCWD, dir.c_str(), W_OK | X_OK, AT_EACCESS) != 0) {
    return "the runner's group cannot write it";
  }
  return "";
}

// A team's budgets in a message: one line each, "period amount remaining spent" (micros; spent
// "-" when not known).
std::string budget_lines(const std::vector<TeamBudget>& budgets) {
  std::string lines;
  for (const TeamBudget& b : budgets) {
    lines += b.period + " " + std::to_string(b.amount.micros) + " " +
             std::to_string(b.remaining.micros) + " " +
             (b.spent ? std::to_string(b.spent->micros) : std::string("-")) + "\n";
  }
  return lines;
}

std::vector<TeamBudget> parse_budget_lines(const std::string& text) {
  std::vector<TeamBudget> budgets;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    TeamBudget b;
    std::string spent;
    if (!(fields >> b.period >> b.amount.micros >> b.remaining.micros >> spent)) continue;
    if (spent != "-") b.spent = Money{std::strtoll(spent.c_str(), nullptr, 10)};
    budgets.push_back(b);
  }
  return budgets;
}

[[noreturn]] void writer_loop(int fd, const std::string& dir, const MetricsBinding& binding) {
  std::unique_ptr<MetricsSink> sink = direct_metrics_sink(dir, true);
  const std::string run_file = run_metrics_file(binding.run_id);
  bool ended = false;
  bool complained = false;
  auto complain = [&complained](const std::string& why) {
    if (complained) return;
    complained = true;
    std::fprintf(stderr, "spendcap: metrics file: %s\n", why.c_str());
  };
  while (true) {
    std::uint32_t size = 0;
    if (!read_exactly(fd, reinterpret_cast<char*>(&size), sizeof size) || size == 0 ||
        size > (1u << 20)) {
      ::_exit(0);
    }
    std::string body(size, '\0');
    if (!read_exactly(fd, body.data(), size)) ::_exit(0);
    std::vector<std::string> fields;
    for (size_t at = 1; at + sizeof(std::uint32_t) <= body.size();) {
      std::uint32_t n = 0;
      std::memcpy(&n, body.data() + at, sizeof n);
      at += sizeof n;
      if (at + n > body.size()) break;
      fields.push_back(body.substr(at, n));
      at += n;
    }
    // Only this run's file and this run's team, in its currency; the end counted once.
    bool own_file = !fields.empty() && fields[0] == run_file;
    bool own_team =
        fields.size() >= 2 && fields[0] == binding.team && fields[1] == binding.currency;
    try {
      if (body[0] == 'W' && fields.size() == 2 && own_file) {
        sink->write_run(fields[0], fields[1]);
      } else if (body[0] == 'R' && fields.size() == 1 && own_file) {
        sink->remove_run(fields[0]);
      } else if (body[0] == 'T' && fields.size() == 4 && own_team && !ended) {
        ended = true;
        sink->add_to_team(fields[0], fields[1], Money{std::strtoll(fields[2].c_str(), nullptr, 10)},
                          parse_budget_lines(fields[3]));
      } else if (body[0] == 'G' && fields.size() == 3 && own_team && !ended) {
        sink->refresh_team(fields[0], fields[1], parse_budget_lines(fields[2]));
      } else if (body[0] == 'S') {
        if (!send_all(fd, "k")) ::_exit(0);
      } else {
        complain("the metrics writer of run " + binding.run_id +
                 " refused a write for another run, team or currency, or a second end");
      }
    } catch (const std::exception& error) {
      complain(error.what());
    }
  }
}

class WriterSink final : public MetricsSink {
 public:
  explicit WriterSink(int fd) : fd_(fd) {}
  ~WriterSink() override {
    // Waits (bounded) until everything sent is written: the run's final team update included.
    if (send_all(fd_, frame('S', {}))) {
      pollfd p{fd_, POLLIN, 0};
      char ack = 0;
      if (::poll(&p, 1, 5000) == 1) (void)::read(fd_, &ack, 1);
    }
    ::close(fd_);
  }
  WriterSink(const WriterSink&) = delete;
  WriterSink& operator=(const WriterSink&) = delete;

  void write_run(const std::string& name, const std::string& text) override {
    send(frame('W', {name, text}));
  }
  void remove_run(const std::string& name) override { send(frame('R', {name})); }
  void add_to_team(const std::string& team, const std::string& currency, Money spend,
                   const std::vector<TeamBudget>& budgets) override {
    send(frame('T', {team, currency, std::to_string(spend.micros), budget_lines(budgets)}));
  }
  void refresh_team(const std::string& team, const std::string& currency,
                    const std::vector<TeamBudget>& budgets) override {
    send(frame('G', {team, currency, budget_lines(budgets)}));
  }

 private:
  void send(const std::string& message) {
    if (!send_all(fd_, message)) {
      throw Error("metrics writer", "gone: " + errno_text(errno),
                  "the metrics stop for this run; enforcement goes on");
    }
  }
  int fd_;
};

}  // namespace

std::shared_ptr<MetricsSink> start_runner_metrics_writer(const std::string& dir,
                                                         const MetricsBinding& binding) {
  gid_t real = 0, effective = 0, saved = 0;
  if (::getresgid(&real, &effective, &saved) != 0) {
    throw Error("--metrics-dir " + dir, "cannot read the groups: " + errno_text(errno), "");
  }
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    throw Error("--metrics-dir " + dir, "cannot start the metrics writer: " + errno_text(errno),
                "");
  }
  pid_t child = ::fork();
  if (child < 0) {
    ::close(pair[0]);
    ::close(pair[1]);
    throw Error("--metrics-dir " + dir, "cannot start the metrics writer: " + errno_text(errno),
                "");
  }
  if (child == 0) {
    // The intermediate: its child is the writer, re-parented away from the supervisor.
    if (::fork() != 0) ::_exit(0);
    ::setsid();
    for (int signal :
         {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU, SIGPIPE, SIGUSR1, SIGUSR2}) {
      ::signal(signal, SIG_IGN);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    // Nothing of spendcap's but the socket and stderr (for its one complaint).
    if (::dup2(pair[1], 3) < 0) ::_exit(1);
    ::syscall(SYS_close_range, 4u, ~0u, 0u);
    int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull >= 0) {
      ::dup2(devnull, 0);
      ::dup2(devnull, 1);
    }
    if (::setegid(saved) != 0) ::_exit(1);
    std::string why = unusable(dir, saved);
    if (!send_all(3, why.empty() ? std::string("ok\n") : why + "\n")) ::_exit(0);
    if (!why.empty()) ::_exit(0);
    writer_loop(3, dir, binding);
  }
  ::close(pair[1]);
  while (::waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
  }
  std::string answer;
  char c = 0;
  while (answer.size() < 512 && read_exactly(pair[0], &c, 1) && c != '\n') answer += c;
  if (answer != "ok") {
    ::close(pair[0]);
    throw Error("--metrics-dir " + dir,
                answer.empty() ? "the metrics writer did not start" : answer,
                "on a shared runner the directory is root:spendcap 2770, made by "
                "scripts/install-shared-runner.sh --metrics-dir DIR");
  }
  return std::make_shared<WriterSink>(pair[0]);
}

}  // namespace spendcap
