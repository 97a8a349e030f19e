#include "spendcap/supervise/respawn_part.hpp"

#include <linux/cn_proc.h>
#include <linux/connector.h>
#include <linux/netlink.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "spendcap/base/error.hpp"
#include "spendcap/guards/respawn_loop.hpp"
#include "spendcap/process/process_tree.hpp"
#include "spendcap/supervise/reporter.hpp"
#include "spendcap/supervise/run_part.hpp"

namespace asio = boost::asio;

namespace spendcap {

namespace {

// The inode of the initial PID namespace (PROC_PID_INIT_INO): the connector's pids are its pids.
constexpr ino_t kInitialPidNamespace = 0xEFFFFFFCU;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// exe + argv + parent of a live process; nullopt once it is gone.
std::optional<std::string> key_of(pid_t pid, pid_t parent) {
  char exe[4096];
  ssize_t length = ::readlink(("/proc/" + std::to_string(pid) + "/exe").c_str(), exe, sizeof exe);
  if (length <= 0) return std::nullopt;
  std::string cmdline = read_text("/proc/" + std::to_string(pid) + "/cmdline");
  if (cmdline.empty()) return std::nullopt;
  return respawn_key(std::string(exe, static_cast<std::size_t>(length)), cmdline, parent);
}

// The pid as the guard's PID namespace numbers it: the last of /proc/PID/status's NSpid (the pid
// itself without a namespace); 0 when it is gone.
pid_t innermost_pid(pid_t pid) {
  std::istringstream status(read_text("/proc/" + std::to_string(pid) + "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    long value = 0, last = 0;
    while (fields >> value) last = value;
    return static_cast<pid_t>(last);
  }
  return 0;
}

// The netlink process connector, subscribed; -1 and why not where it is not permitted.
int open_connector(std::string& why_not) {
  if (::geteuid() != 0) {
    why_not = "not root";
    return -1;
  }
  struct stat ns {};
  if (::stat("/proc/self/ns/pid", &ns) != 0 || ns.st_ino != kInitialPidNamespace) {
    why_not = "not in the initial PID namespace";
    return -1;
  }
  int fd = ::socket(PF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_CONNECTOR);
  if (fd < 0) {
    why_not = "netlink connector: " + errno_text(errno);
    return -1;
  }
  sockaddr_nl address{};
  address.nl_family = AF_NETLINK;
  address.nl_groups = CN_IDX_PROC;
  // A large receive buffer: a burst of forks (a build) must not overflow it at once.
  int size = 4 * 1024 * 1024;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  // nlmsghdr, cn_msg, then the op in cn_msg's flexible data.
  constexpr std::size_t kPayload = sizeof(cn_msg) + sizeof(proc_cn_mcast_op);
  alignas(nlmsghdr) std::array<char, NLMSG_SPACE(kPayload)> listen{};
  auto* header = reinterpret_cast<nlmsghdr*>(listen.data());
  header->nlmsg_len = NLMSG_LENGTH(kPayload);
  header->nlmsg_type = NLMSG_DONE;
  header->nlmsg_pid = static_cast<__u32>(::getpid());
  auto* message = static_cast<cn_msg*>(NLMSG_DATA(header));
  message->id.idx = CN_IDX_PROC;
  message->id.val = CN_VAL_PROC;
  message->len = sizeof(proc_cn_mcast_op);
  proc_cn_mcast_op op = PROC_CN_MCAST_LISTEN;
  std::memcpy(message->data, &op, sizeof op);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::send(fd, listen.data(), header->nlmsg_len, 0) < 0) {
    why_not = "netlink connector: " + errno_text(errno);
    ::close(fd);
    return -1;
  }
  // Self-test: renaming this thread (to its own name) makes the kernel send a comm event for it.
  // Until that event comes back within 1 s, the connector is not trusted.
  char name[17] = {};
  ::prctl(PR_GET_NAME, name);
  ::prctl(PR_SET_NAME, name);
  pid_t self = static_cast<pid_t>(::syscall(SYS_gettid));
  std::array<char, 8192> buffer;
  TimePoint until = now() + std::chrono::seconds(1);
  while (now() < until) {
    pollfd wait{fd, POLLIN, 0};
    int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(until - now()).count());
    if (::poll(&wait, 1, std::max(left, 1)) <= 0) continue;
    ssize_t got = ::recv(fd, buffer.data(), buffer.size(), 0);
    if (got <= 0) continue;
    for (auto* header = reinterpret_cast<nlmsghdr*>(buffer.data());
         NLMSG_OK(header, static_cast<unsigned>(got)); header = NLMSG_NEXT(header, got)) {
      auto* message = static_cast<cn_msg*>(NLMSG_DATA(header));
      auto* event = reinterpret_cast<proc_event*>(message->data);
      if (event->what == proc_event::PROC_EVENT_COMM &&
          static_cast<pid_t>(event->event_data.comm.process_pid) == self) {
        return fd;
      }
    }
  }
  why_not = "netlink connector: its self-test saw no event";
  ::close(fd);
  return -1;
}

class RespawnPart final : public RunPart {
 public:
  RespawnPart(asio::io_context& io, const Reporter& reporter, const RunTerms& terms,
              const RespawnPlan& plan, pid_t root, std::function<void(const Trip&)> trip)
      : timer_(io),
        events_(io),
        reporter_(reporter),
        plan_(terms),
        rules_(plan),
        root_(root),
        trip_(std::move(trip)),
        tracker_(rules_.max_restarts, rules_.window) {
    std::string why_not = "turned off";
    int fd = rules_.connector_allowed ? open_connector(why_not) : -1;
    if (fd >= 0) {
      events_.assign(fd);
      detector_ = "netlink process connector";
    } else {
      detector_ = "fallback, warns only (" + why_not +
                  "), except for orphans, whose exit statuses the guard reports";
    }
  }

  void on_launched(TimePoint) override {
    // Which detector is a detail (every ordinary user gets the fallback): --verbose says it.
    if (plan_.verbose) reporter_.line("respawn-loop guard: " + detector_);
    if (events_.is_open()) {
      // The processes already forked before the first event is read: the tree as it is now.
      for (const ProcStat& member : live_descendants(root_)) members_[member.pid] = member.ppid;
      read_events();
    } else {
      walk();
    }
  }
  void on_stopping() override { stop(); }
  void on_finish() override { stop(); }
  // The fallback cannot see exit statuses, except of orphans: the guard reaps them and says how
  // they ended. The walk that finds their replacement counts them fully (exited + started).
  void on_orphan_exited(int pid, int wait_status) override {
    if (stopped_ || events_.is_open()) return;  // the connector sees every exit itself
    orphan_exits_[pid] = OrphanExit{wait_status, now()};
  }

 private:
  void stop() {
    stopped_ = true;
    timer_.cancel();
    if (events_.is_open()) events_.close();
  }

  // ---- exact: the connector ----

  void read_events() {
    events_.async_read_some(asio::buffer(buffer_), [this](auto error, std::size_t bytes) {
      if (stopped_) return;
      if (error == asio::error::no_buffer_space) {
        resync();
      } else if (error) {
        return;
      } else {
        on_datagram(bytes);
      }
      if (!stopped_) read_events();
    });
  }

  void on_datagram(std::size_t bytes) {
    auto length = static_cast<int>(bytes);
    for (auto* header = reinterpret_cast<nlmsghdr*>(buffer_.data());
         NLMSG_OK(header, static_cast<unsigned>(length)); header = NLMSG_NEXT(header, length)) {
      auto* message = static_cast<cn_msg*>(NLMSG_DATA(header));
      const auto& event = *reinterpret_cast<const proc_event*>(message->data);
      switch (event.what) {
        case proc_event::PROC_EVENT_FORK: {
          const auto& fork = event.event_data.fork;
          // Only processes, and only the tree's: a child whose parent is the guard or a member.
          // The machine's other forks cost one look-up each, never a read of /proc.
          auto child = static_cast<pid_t>(fork.child_pid);
          auto parent = static_cast<pid_t>(fork.parent_tgid);
          if (fork.child_pid == fork.child_tgid && (parent == root_ || members_.count(parent))) {
            members_[child] = parent;
            started(child, parent);
          }
          break;
        }
        case proc_event::PROC_EVENT_EXEC: {
          const auto& exec = event.event_data.exec;
          auto member = members_.find(static_cast<pid_t>(exec.process_pid));
          if (exec.process_pid == exec.process_tgid && member != members_.end()) {
            started(member->first, member->second);
          }
          break;
        }
        case proc_event::PROC_EVENT_EXIT: {
          const auto& exit = event.event_data.exit;
          if (exit.process_pid == exit.process_tgid &&
              members_.erase(static_cast<pid_t>(exit.process_pid))) {
            exited(static_cast<pid_t>(exit.process_pid), static_cast<int>(exit.exit_code));
          }
          break;
        }
        default:
          break;
      }
      if (stopped_) return;
    }
  }

  void started(pid_t pid, pid_t parent) {
    auto key = key_of(pid, parent);
    if (!key) return;  // gone before it could be named
    names_[pid] = *key;
    int restarts = tracker_.started(*key, now());
    if (tracker_.over(restarts)) stop_run(*key, restarts);
  }

  void exited(pid_t pid, int wait_status) {
    auto it = names_.find(pid);
    if (it == names_.end()) return;
    tracker_.exited(it->second, now(), wait_status != 0);
    names_.erase(it);
  }

  // Events were lost: forget the names of processes that are gone (their exits will not come).
  void resync() {
    ++overruns_;
    for (auto it = names_.begin(); it != names_.end();) {
      it = is_alive(it->first) ? std::next(it) : names_.erase(it);
    }
    // Forks may have been lost too: the members are read again from the tree itself.
    members_.clear();
    for (const ProcStat& member : live_descendants(root_)) members_[member.pid] = member.ppid;
  }

  void stop_run(const std::string& key, int restarts) {
    if (plan_.mode == Mode::warn) {
      if (!warned_)
        reporter_.line("warn mode: runaway:respawn-loop would stop the run now (" +
                       describe(key, restarts) + "); it goes on");
      warned_ = true;
      return;
    }
    reporter_.line(describe(key, restarts));
    trip_(Trip{TripKind::runaway, "runaway:respawn-loop", 0});
  }

  std::string describe(const std::string& key, int restarts,
                       const char* how = "restarted after an abnormal exit") const {
    std::string argv = key.substr(key.find('\0') + 1);
    argv = argv.substr(0, argv.rfind('\0'));
    for (char& c : argv) {
      if (c == '\0') c = ' ';
    }
    while (!argv.empty() && argv.back() == ' ') argv.pop_back();
    return "respawn loop: '" + argv + "' " + how + " " + std::to_string(restarts) +
           " times within " + format_duration(rules_.window) + " (limit " +
           std::to_string(rules_.max_restarts) + ")";
  }

  // ---- fallback: the tree's children each interval ----

  struct Seen {
    std::string key;
    TimePoint first_seen;
    std::uint64_t start_time;
    pid_t guard_pid = 0;  // numbered in the guard's PID namespace (orphan_exited events)
  };

  void walk() {
    if (stopped_) return;
    TimePoint at = now();
    std::map<pid_t, Seen> current;
    for (const ProcStat& member : live_descendants(root_)) {
      auto known = seen_.find(member.pid);
      if (known != seen_.end() && known->second.start_time == member.start_time) {
        current.emplace(member.pid, known->second);
        continue;
      }
      auto key = key_of(member.pid, member.ppid);
      if (!key) continue;
      current.emplace(member.pid, Seen{*key, at, member.start_time, innermost_pid(member.pid)});
    }
    // A new pid of a key whose latest pid is gone: a replacement, however many other programs
    // ran in between (a shell loop's `sleep`). Several live pids of one key are a pool of workers
    // (a DataLoader's), replaced by the epoch, not a restart loop.
    std::map<std::string, int> live;
    for (const auto& [pid, now_seen] : current) {
      if (++live[now_seen.key] > 1) pools_.insert(now_seen.key);
    }
    for (const auto& [pid, now_seen] : current) {
      auto last = latest_.find(now_seen.key);
      if (last != latest_.end() && last->second.pid == pid) {
        last->second.last_seen = at;
        continue;
      }
      auto orphan = last == latest_.end() || current.count(last->second.pid)
                        ? orphan_exits_.end()
                        : orphan_exits_.find(last->second.guard_pid);
      if (orphan != orphan_exits_.end()) {
        // The predecessor was an orphan: its exit status is known, so this is the exact count.
        bool abnormal = orphan->second.wait_status != 0;
        orphan_exits_.erase(orphan);
        tracker_.exited(now_seen.key, at, abnormal);
        int restarts = tracker_.started(now_seen.key, at);
        if (abnormal && tracker_.over(restarts) && !tripped_) {
          tripped_ = true;
          stop_run(now_seen.key, restarts);
        }
      } else if (last != latest_.end() && !current.count(last->second.pid) &&
                 !pools_.count(now_seen.key)) {
        Nanos life = last->second.last_seen - last->second.first_seen;
        int restarts = tracker_.replaced(now_seen.key, at, life, rules_.min_life);
        if (tracker_.over(restarts) && !warned_) {
          warned_ = true;
          reporter_.line("warning: possible " +
                         describe(now_seen.key, restarts, "restarted after a short life") +
                         " (each lived under " + format_duration(rules_.min_life) +
                         "; the fallback detector cannot see exit statuses, so it only warns)");
        }
      }
      latest_[now_seen.key] = Latest{pid, now_seen.first_seen, at, now_seen.guard_pid};
    }
    for (auto it = orphan_exits_.begin(); it != orphan_exits_.end();) {
      it = at - it->second.at > rules_.window ? orphan_exits_.erase(it) : std::next(it);
    }
    // Programs not seen for a window are forgotten: a long build does not grow this without end.
    for (auto it = latest_.begin(); it != latest_.end();) {
      it = at - it->second.last_seen > rules_.window ? latest_.erase(it) : std::next(it);
    }
    seen_ = std::move(current);
    timer_.expires_after(plan_.interval);
    timer_.async_wait([this](auto error) {
      if (!error) walk();
    });
  }

  asio::steady_timer timer_;
  asio::posix::stream_descriptor events_;
  const Reporter& reporter_;
  const RunTerms& plan_;
  RespawnPlan rules_;
  pid_t root_;
  std::function<void(const Trip&)> trip_;
  RespawnTracker tracker_;
  std::string detector_;
  std::array<char, 64 * 1024> buffer_{};
  std::map<pid_t, std::string> names_;
  std::map<pid_t, pid_t> members_;  // the tree's processes (host pids), each with its parent
  std::map<pid_t, Seen> seen_;
  struct Latest {
    pid_t pid;
    TimePoint first_seen, last_seen;
    pid_t guard_pid = 0;
  };
  struct OrphanExit {
    int wait_status;
    TimePoint at;
  };
  std::map<pid_t, OrphanExit> orphan_exits_;  // by guard_pid, until a walk finds the replacement
  bool tripped_ = false;
  std::map<std::string, Latest> latest_;  // the latest pid of each program, for the fallback
  std::set<std::string> pools_;           // programs seen running several at once
  int overruns_ = 0;
  bool warned_ = false;
  bool stopped_ = false;
};

}  // namespace

std::unique_ptr<RunPart> make_respawn_part(asio::io_context& io, const Reporter& reporter,
                                           const RunTerms& terms, const RespawnPlan& plan,
                                           pid_t root, std::function<void(const Trip&)> trip) {
  return std::make_unique<RespawnPart>(io, reporter, terms, plan, root, std::move(trip));
}

}  // namespace spendcap
