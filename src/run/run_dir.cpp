#include "spendcap/run/run_dir.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <cerrno>

#include "spendcap/base/error.hpp"
#include "spendcap/process/tree_guard.hpp"

namespace spendcap {

RunDir::RunDir(const Environment& env, const std::string& run_id) {
  auto tmp = env.find("TMPDIR");
  std::string base = tmp != env.end() && !tmp->second.empty() ? tmp->second : "/tmp";
  std::string pattern = base + "/spendcap-" + run_id.substr(0, 8) + "-XXXXXX";
  if (!::mkdtemp(pattern.data())) {
    throw Error(base, "cannot create the run directory: " + errno_text(errno),
                "set TMPDIR to a writable directory");
  }
  path_ = pattern;
}

std::string RunDir::checkpoint_done() const {
  return checkpoint_done_path(path_);
}

void RunDir::remove() const noexcept {
  ::unlink(checkpoint_done().c_str());
  ::unlink(progress().c_str());
  ::rmdir(path_.c_str());
}

}  // namespace spendcap
