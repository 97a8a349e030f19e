// The test suite's switches (moved from run/request.hpp so that the steps after the settings need
// not see the flags as typed).
#pragma once

#include "spendcap/base/environment.hpp"

namespace spendcap {

// Switches that exist for the test suite's negative controls only ($SPENDCAP_TEST_SWITCHES, comma
// separated). Refused under a locked policy: they would let a job escape its tree or its budget.
struct TestSwitches {
  bool no_cgroup = false;             // follow the tree by parentage only (the fallback)
  bool no_subreaper = false;          // neither the guard nor spendcap is a subreaper
  bool no_ceilings = false;           // grants ignore other runs: shared budgets overshoot
  bool no_proc_connector = false;     // the respawn-loop guard's fallback detector
  bool storage_every_second = false;  // --checkpoint-dir sampled every second, not every minute
  bool any() const {
    return no_cgroup || no_subreaper || no_ceilings || no_proc_connector || storage_every_second;
  }
  static TestSwitches from(const Environment& env);
};

}  // namespace spendcap
