#include "spendcap/guards/respawn_loop.hpp"

namespace spendcap {

std::string respawn_key(const std::string& exe, const std::string& cmdline, long parent) {
  std::string key = exe;
  key += '\0';
  key += cmdline;
  key += '\0';
  key += std::to_string(parent);
  return key;
}

void RespawnTracker::exited(const std::string& key, TimePoint, bool abnormal) {
  last_abnormal_[key] = abnormal;
}

int RespawnTracker::count(const std::string& key, TimePoint at) {
  auto& times = restarts_[key];
  times.push_back(at);
  while (!times.empty() && at - times.front() > window_) times.pop_front();
  return static_cast<int>(times.size());
}

int RespawnTracker::started(const std::string& key, TimePoint at) {
  auto last = last_abnormal_.find(key);
  if (last == last_abnormal_.end() || !last->second) {
    auto it = restarts_.find(key);
    return it == restarts_.end() ? 0 : static_cast<int>(it->second.size());
  }
  last->second = false;  // one exit is one restart
  return count(key, at);
}

int RespawnTracker::replaced(const std::string& key, TimePoint at, Nanos predecessor_life,
                             Nanos min_life) {
  if (predecessor_life >= min_life) {
    auto it = restarts_.find(key);
    return it == restarts_.end() ? 0 : static_cast<int>(it->second.size());
  }
  return count(key, at);
}

}  // namespace spendcap
