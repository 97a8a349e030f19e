#include "spendcap/process/runner_channel.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <sstream>

#include "spendcap/base/error.hpp"

namespace spendcap {

namespace {

const char* const kReinstall =
    "the runner's owner reinstalls it with scripts/install-shared-runner.sh";

bool root_only(const struct stat& st) {
  return st.st_uid == 0 && !(st.st_mode & (S_IWGRP | S_IWOTH));
}

[[noreturn]] void malformed(const std::string& why) {
  throw Error(kRunnerConfigPath, "malformed: " + why,
              "it holds {\"runner\": PATH, \"user\": NAME, \"spendcap\": PATH}");
}

// A JSON string at text[at] (the opening quote), its value appended to *out; returns the index
// after the closing quote.
size_t read_string(const std::string& text, size_t at, std::string* out) {
  if (at >= text.size() || text[at] != '"') malformed("a string was expected");
  for (++at; at < text.size(); ++at) {
    char c = text[at];
    if (c == '"') return at + 1;
    if (static_cast<unsigned char>(c) < 0x20) malformed("a control character in a string");
    if (c != '\\') {
      out->push_back(c);
      continue;
    }
    if (++at >= text.size()) break;
    switch (text[at]) {
      case '"':
      case '\\':
      case '/':
        out->push_back(text[at]);
        break;
      case 'n':
        out->push_back('\n');
        break;
      case 't':
        out->push_back('\t');
        break;
      case 'u': {
        if (text.size() - at < 5) malformed("a short \\u escape");
        std::string hex = text.substr(at + 1, 4);
        char* end = nullptr;
        long code = std::strtol(hex.c_str(), &end, 16);
        if (*end != '\0' || hex.find_first_of("+- ") != std::string::npos || code <= 0 ||
            code >= 0x80) {
          malformed("a \\u escape outside ASCII");
        }
        out->push_back(static_cast<char>(code));
        at += 4;
        break;
      }
      default:
        malformed("an unknown escape");
    }
  }
  malformed("an unterminated string");
}

size_t skip_space(const std::string& text, size_t at) {
  while (at < text.size() &&
         (text[at] == ' ' || text[at] == '\n' || text[at] == '\t' || text[at] == '\r')) {
    ++at;
  }
  return at;
}

int parse_fd(const std::string& text, const char* what) {
  char* end = nullptr;
  errno = 0;
  long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || text[0] < '0' || text[0] > '9' || *end != '\0' || errno || value <= 2 ||
      value > 1 << 20) {
    throw Error(what, "not a descriptor: \"" + text.substr(0, 32) + "\"",
                "run spendcap, not the runner");
  }
  return static_cast<int>(value);
}

}  // namespace

long parse_runner_id(const std::string& text, const char* what) {
  char* end = nullptr;
  errno = 0;
  long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || text[0] < '0' || text[0] > '9' || *end != '\0' || errno || value < 0 ||
      value > 0x7fffffff) {
    throw Error(what, "not an id: \"" + text.substr(0, 32) + "\"", "run spendcap, not the runner");
  }
  return value;
}

namespace {

bool starts_with_any(const std::string& name, std::initializer_list<const char*> prefixes) {
  for (const char* prefix : prefixes) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

std::string lowered(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), ::tolower);
  return name;
}

}  // namespace

bool steers_the_loader(const std::string& name) {
  if (starts_with_any(name, {"LD_", "GCONV", "MALLOC_", "GLIBC_"})) return true;
  std::string lower = lowered(name);
  for (const char* listed :
       {"nlspath", "locpath", "hostaliases", "localdomain", "res_options", "tzdir"}) {
    if (lower == listed) return true;
  }
  return false;
}

bool steers_network_code(const std::string& name) {
  if (starts_with_any(name, {"PG", "SSL", "CURL", "OPENSSL_"})) return true;
  std::string lower = lowered(name);
  return lower.size() >= 6 && lower.compare(lower.size() - 6, 6, "_proxy") == 0;
}

RunnerConfig parse_runner_config(const std::string& text) {
  std::map<std::string, std::string> fields;
  size_t at = skip_space(text, 0);
  if (at >= text.size() || text[at] != '{') malformed("not a JSON object");
  at = skip_space(text, at + 1);
  if (at < text.size() && text[at] == '}') {
    at = at + 1;
  } else {
    while (true) {
      std::string key, value;
      at = skip_space(text, read_string(text, at, &key));
      if (at >= text.size() || text[at] != ':') malformed("a ':' was expected");
      at = skip_space(text, read_string(text, skip_space(text, at + 1), &value));
      fields.emplace(std::move(key), std::move(value));
      if (at < text.size() && text[at] == ',') {
        at = skip_space(text, at + 1);
        continue;
      }
      if (at < text.size() && text[at] == '}') {
        ++at;
        break;
      }
      malformed("a ',' or '}' was expected");
    }
  }
  if (skip_space(text, at) != text.size()) malformed("text after the object");
  for (const auto& [key, value] : fields) {
    if (key != "runner" && key != "user" && key != "spendcap" && key != "spool") {
      throw Error(kRunnerConfigPath, "unknown key \"" + key.substr(0, 32) + "\"", kReinstall);
    }
  }
  RunnerConfig config;
  config.runner = fields["runner"];
  config.user = fields["user"];
  config.spendcap = fields["spendcap"];
  if (auto spool = fields.find("spool"); spool != fields.end()) config.spool = spool->second;
  if (config.runner.empty() || config.runner[0] != '/' || config.spendcap.empty() ||
      config.spendcap[0] != '/' || config.user.empty() || config.spool.empty() ||
      config.spool[0] != '/') {
    throw Error(kRunnerConfigPath,
                "\"runner\", \"spendcap\" and \"spool\" must be absolute paths and \"user\" "
                "a name",
                kReinstall);
  }
  return config;
}

std::optional<RunnerConfig> read_runner_config() {
  struct stat st {};
  if (::lstat(kRunnerConfigPath, &st) != 0) {
    if (errno == ENOENT) return std::nullopt;
    throw Error(kRunnerConfigPath, errno_text(errno), "check the runner's install");
  }
  struct stat dir {};
  if (!S_ISREG(st.st_mode) || !root_only(st) || ::stat("/etc/spendcap", &dir) != 0 ||
      !root_only(dir) || st.st_size > 65536) {
    throw Error(kRunnerConfigPath, "not root's alone (owner root, no group or other write)",
                kReinstall);
  }
  std::ifstream file(kRunnerConfigPath);
  std::stringstream text;
  text << file.rdbuf();
  return parse_runner_config(text.str());
}

std::map<std::string, std::string> parse_environment_block(const std::string& block) {
  if (block.size() > kMaxEnvironmentBytes) {
    throw Error("privileged runner", "the front's environment is over 16 MiB", "unset something");
  }
  std::map<std::string, std::string> env;
  size_t start = 0;
  while (start < block.size()) {
    size_t end = block.find('\0', start);
    if (end == std::string::npos) end = block.size();
    size_t eq = block.find('=', start);
    if (eq != std::string::npos && eq > start && eq < end) {
      env.emplace(block.substr(start, eq - start), block.substr(eq + 1, end - eq - 1));
    }
    start = end + 1;
  }
  return env;
}

std::string closed_standard_text(const std::array<bool, 3>& closed) {
  std::string text;
  for (int fd = 0; fd <= 2; ++fd) {
    if (closed[fd]) text += static_cast<char>('0' + fd);
  }
  return text;
}

FrontFds parse_front_fds(const std::string& text) {
  size_t comma = text.find(',');
  if (comma == std::string::npos) {
    throw Error("--front-fds", "not a descriptor pair", "run spendcap, not the runner");
  }
  FrontFds fds;
  size_t second = text.find(',', comma + 1);
  if (second != std::string::npos) {
    std::string closed = text.substr(second + 1);
    if (closed.empty() || closed.size() > 3) {
      throw Error("--front-fds", "not a list of closed fds 0-2", "run spendcap, not the runner");
    }
    for (char c : closed) {
      if (c < '0' || c > '2' || fds.closed_standard[c - '0']) {
        throw Error("--front-fds", "not a list of closed fds 0-2", "run spendcap, not the runner");
      }
      fds.closed_standard[c - '0'] = true;
    }
  }
  fds.environment = parse_fd(text.substr(0, comma), "--front-fds");
  fds.control = parse_fd(
      text.substr(comma + 1, second == std::string::npos ? std::string::npos : second - comma - 1),
      "--front-fds");
  if (fds.environment == fds.control) {
    throw Error("--front-fds", "not a descriptor pair", "run spendcap, not the runner");
  }
  return fds;
}

int front_seals() {
  return F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL;
}

bool is_front_environment(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return false;
  int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & front_seals()) != front_seals()) return false;
  char link[64] = {};
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  ssize_t n = ::readlink(path.c_str(), link, sizeof link - 1);
  return n > 0 && std::string(link, static_cast<size_t>(n)).rfind("/memfd:", 0) == 0;
}

std::map<std::string, std::string> read_environment_fd(int fd) {
  std::string block;
  char buffer[65536];
  off_t offset = 0;
  while (true) {
    ssize_t n = ::pread(fd, buffer, sizeof buffer, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw Error("privileged runner", "reading the front's environment: " + errno_text(errno));
    }
    if (n == 0) break;
    block.append(buffer, static_cast<size_t>(n));
    offset += n;
    if (block.size() > kMaxEnvironmentBytes) break;
  }
  return parse_environment_block(block);
}

std::vector<std::string> supervisor_args(const SupervisorCall& call) {
  return {kSupervisorFlag,
          std::to_string(call.caller_uid),
          std::to_string(call.guard_pid),
          std::to_string(call.spec_fd),
          std::to_string(call.events_fd),
          std::to_string(call.control_fd),
          std::to_string(call.kill_fd),
          std::to_string(call.env_fd),
          call.cgroup_dir};
}

SupervisorCall parse_supervisor_args(const std::vector<std::string>& words) {
  const char* what = kSupervisorFlag;
  if (words.size() < static_cast<size_t>(kSupervisorArgs) || words[0] != kSupervisorFlag) {
    throw Error(what, "the runner's call is incomplete", "run spendcap, not the runner");
  }
  SupervisorCall call;
  call.caller_uid = static_cast<uid_t>(parse_runner_id(words[1], what));
  call.guard_pid = static_cast<pid_t>(parse_runner_id(words[2], what));
  call.spec_fd = parse_fd(words[3], what);
  call.events_fd = parse_fd(words[4], what);
  call.control_fd = parse_fd(words[5], what);
  call.kill_fd = parse_fd(words[6], what);
  call.env_fd = parse_fd(words[7], what);
  call.cgroup_dir = words[8];
  if (call.guard_pid <= 1 || call.cgroup_dir.empty() || call.cgroup_dir[0] != '/' ||
      call.cgroup_dir.find("/../") != std::string::npos) {
    throw Error(what, "the runner's call is malformed", "run spendcap, not the runner");
  }
  return call;
}

}  // namespace spendcap
