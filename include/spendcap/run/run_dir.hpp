// The run's private directory: $SPENDCAP_CHECKPOINT_DONE and $SPENDCAP_PROGRESS live in it. Made
// before admission, so that failing to make it costs nothing in the ledger; removed at the end (by
// the guard when spendcap is killed).
#pragma once

#include <string>

#include "spendcap/base/environment.hpp"

namespace spendcap {

class RunDir {
 public:
  // Under $TMPDIR (else /tmp). Throws Error when it cannot be made.
  RunDir(const Environment& env, const std::string& run_id);
  ~RunDir() { remove(); }
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  const std::string& path() const { return path_; }
  std::string checkpoint_done() const;
  std::string progress() const { return path_ + "/progress.jsonl"; }
  void remove() const noexcept;

 private:
  std::string path_;
};

}  // namespace spendcap
