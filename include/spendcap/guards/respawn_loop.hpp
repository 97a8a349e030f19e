// The respawn-loop guard, inside the tree: the same executable + argv + parent restarted after an
// abnormal exit more than N times (default 10) within a window (default 5m). Healthy re-forks (a
// DataLoader's workers each epoch, a compiler per file) end normally, or run different programs,
// and never count. Pure: the detectors (supervise/respawn_part.hpp) say what they saw.
//
//   exact (the netlink process connector, or an orphan the guard reaped): an exit status is known;
//     a start of a key whose previous process exited abnormally is a restart.
//   fallback (a walk of the tree's children each interval): no exit status; a new pid of a key
//     whose previous pid lived less than the minimum life is a restart, and the guard only warns
//     (a healthy polling loop looks the same).
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <string>

#include "spendcap/base/duration.hpp"

namespace spendcap {

// "exe\0argv\0ppid": what makes two processes the same program in the same place.
std::string respawn_key(const std::string& exe, const std::string& cmdline, long parent);

class RespawnTracker {
 public:
  RespawnTracker(int max_restarts, Nanos window) : max_restarts_(max_restarts), window_(window) {}

  // A process of `key` ended, abnormally or not (exact detectors).
  void exited(const std::string& key, TimePoint at, bool abnormal);
  // A process of `key` started: counts when its predecessor exited abnormally. Returns the
  // restarts of `key` within the window, now.
  int started(const std::string& key, TimePoint at);
  // Fallback: a new pid of `key` replaced one that lived `predecessor_life`.
  int replaced(const std::string& key, TimePoint at, Nanos predecessor_life, Nanos min_life);

  // More than N restarts of one key within the window.
  bool over(int restarts) const { return restarts > max_restarts_; }
  int max_restarts() const { return max_restarts_; }
  Nanos window() const { return window_; }

 private:
  int count(const std::string& key, TimePoint at);
  int max_restarts_;
  Nanos window_;
  std::map<std::string, bool> last_abnormal_;
  std::map<std::string, std::deque<TimePoint>> restarts_;
};

}  // namespace spendcap
