// A process tree on paper, for driving the kill path: it records every signal sent (in order),
// knows which members catch the checkpoint signal and which ignore SIGTERM, and can refill itself
// a few times after SIGKILL to stand for children forked while the kill walked the tree.
#pragma once

#include <signal.h>

#include <vector>

#include "spendcap/process/process_tree.hpp"

namespace spendcap::testing {

class FakeProcessTree : public ProcessTree {
 public:
  struct Member {
    pid_t pid = 0;
    bool catches_checkpoint = false;
    bool ignores_term = false;
    bool alive = true;
  };

  // Adds a live member; returns it for further setup.
  Member& add(bool catches_checkpoint = false, bool ignores_term = false) {
    members_.push_back(Member{next_pid_++, catches_checkpoint, ignores_term, true});
    return members_.back();
  }

  // After each of the next `rounds` SIGKILL rounds, one new child appears (a fork that raced the
  // walk).
  void fork_during_kill(int rounds) { forks_left_ = rounds; }

  bool empty() const {
    for (const Member& m : members_) {
      if (m.alive) return false;
    }
    return true;
  }

  // Every signal sent, in order: one entry per call (SIGKILL for a kill_all round).
  const std::vector<int>& sent() const { return sent_; }
  int count(int signal) const {
    int n = 0;
    for (int s : sent_) n += s == signal;
    return n;
  }
  int checkpoint_receivers() const { return checkpoint_receivers_; }

  std::vector<ProcStat> members() override {
    std::vector<ProcStat> live;
    for (const Member& m : members_) {
      if (m.alive) live.push_back(ProcStat{m.pid, 1, 'S', 0});
    }
    return live;
  }

  int signal_catchers(int signal) override {
    int n = 0;
    for (const Member& m : members_) n += m.alive && m.catches_checkpoint;
    if (n > 0) sent_.push_back(signal);
    checkpoint_receivers_ += n;
    return n;
  }

  int signal_all(int signal) override {
    sent_.push_back(signal);
    int n = 0;
    for (Member& m : members_) {
      if (!m.alive) continue;
      ++n;
      if (signal == SIGTERM && !m.ignores_term) m.alive = false;
    }
    return n;
  }

  int kill_all() override {
    sent_.push_back(SIGKILL);
    int n = 0;
    for (Member& m : members_) {
      n += m.alive;
      m.alive = false;
    }
    if (forks_left_ > 0) {
      --forks_left_;
      add();
    }
    return n;
  }

 private:
  std::vector<Member> members_;
  std::vector<int> sent_;
  pid_t next_pid_ = 100;
  int forks_left_ = 0;
  int checkpoint_receivers_ = 0;
};

}  // namespace spendcap::testing
