#include <doctest/doctest.h>
#include <unistd.h>

#include "spendcap/gpu/account.hpp"

namespace spendcap {

namespace {

// A probe whose figures the test sets between samples.
class FakeProbe final : public GpuProbe {
 public:
  std::vector<GpuDevice> list = {{0, "GPU-a"}, {1, "GPU-b"}};
  std::map<unsigned, std::vector<unsigned>> pids;
  std::map<unsigned, std::vector<GpuProcessSample>> samples;
  bool per_process = true;
  std::map<unsigned, unsigned> device_util;
  std::map<unsigned, unsigned long long> energy;
  std::map<unsigned, unsigned> power;
  std::vector<std::string> missing;

  const std::vector<GpuDevice>& devices() const override { return list; }
  std::optional<std::vector<unsigned>> processes(unsigned index) override { return pids[index]; }
  std::optional<std::vector<GpuProcessSample>> process_utilisation(unsigned index,
                                                                   unsigned long long) override {
    if (!per_process) return std::nullopt;
    return samples[index];
  }
  std::optional<unsigned> device_utilisation(unsigned index) override {
    if (!device_util.count(index)) return std::nullopt;
    return device_util[index];
  }
  std::optional<unsigned long long> energy_mj(unsigned index) override {
    if (!energy.count(index)) return std::nullopt;
    return energy[index];
  }
  std::optional<unsigned> power_mw(unsigned index) override {
    if (!power.count(index)) return std::nullopt;
    return power[index];
  }
  std::vector<std::string> notes() const override { return missing; }
};

const unsigned kSelf = static_cast<unsigned>(::getpid());

}  // namespace

TEST_CASE("gpu: allocated devices come from CUDA_VISIBLE_DEVICES, else Slurm") {
  const char* cuda[] = {"A=1", "CUDA_VISIBLE_DEVICES=0, GPU-b", "SLURM_STEP_GPUS=3", nullptr};
  CHECK(allocated_gpus_from_environment(cuda) == std::vector<std::string>{"0", "GPU-b"});
  const char* slurm[] = {"SLURM_JOB_GPUS=2,3", nullptr};
  CHECK(allocated_gpus_from_environment(slurm) == std::vector<std::string>{"2", "3"});
  const char* none[] = {"CUDA_VISIBLE_DEVICES=NoDevFiles", nullptr};
  CHECK(allocated_gpus_from_environment(none).empty());
  const char* nothing[] = {nullptr};
  CHECK(allocated_gpus_from_environment(nothing).empty());
}

TEST_CASE("gpu: per-process utilisation and the energy counter give busy time and energy") {
  FakeProbe probe;
  probe.pids[1] = {kSelf};
  probe.energy[1] = 1000;
  GpuAccount account(probe, {});
  account.sample(0, {::getpid()}, 0);
  CHECK(account.has_devices());
  probe.samples[1] = {{kSelf, 10, 50}, {kSelf, 20, 100}};  // a mean of 75% over the interval
  probe.energy[1] = 1000 + 300'000;                        // 300 J
  account.sample(2, {::getpid()}, 0);
  GpuSummary s = account.summary();
  CHECK(s.devices == std::vector<std::string>{"1 (GPU-b)"});  // device 0 is not the run's
  CHECK(s.allocated_seconds == doctest::Approx(2));
  REQUIRE(s.busy_seconds);
  CHECK(*s.busy_seconds == doctest::Approx(1.5));
  REQUIRE(s.energy_joules);
  CHECK(*s.energy_joules == doctest::Approx(300));
  CHECK(s.utilisation_source == "per-process");
  CHECK(s.energy_source == "energy counter");
  CHECK_FALSE(s.shared);
  REQUIRE(s.timeline.size() == 1);
  CHECK(*s.timeline[0].utilisation == doctest::Approx(0.75));
}

TEST_CASE("gpu: what is not measured stays unmeasured, never 0") {
  FakeProbe probe;
  probe.per_process = false;  // and no device utilisation, no energy, no power
  GpuAccount account(probe, {"0"});
  account.sample(0, {}, 0);
  account.sample(1, {}, 0);
  GpuSummary s = account.summary();
  CHECK(s.allocated_seconds == doctest::Approx(1));
  CHECK_FALSE(s.busy_seconds);
  CHECK_FALSE(s.mean_utilisation());
  CHECK_FALSE(s.energy_joules);
  CHECK(s.energy_source.empty());
}

TEST_CASE("gpu: device-level fallback, integrated power, and a shared device's share") {
  FakeProbe probe;
  probe.per_process = false;
  probe.pids[0] = {kSelf, 4194000};  // someone else's process too
  probe.device_util[0] = 40;
  probe.power[0] = 200'000;  // 200 W
  GpuAccount account(probe, {"GPU-a"});
  account.sample(0, {::getpid()}, 0);
  account.sample(4, {::getpid()}, 0);
  GpuSummary s = account.summary();
  CHECK(s.utilisation_source == "device-level");
  CHECK(*s.busy_seconds == doctest::Approx(1.6));
  CHECK(s.energy_source == "integrated power");
  CHECK(s.shared);
  // Without per-process figures the share is by process count: half of 800 J.
  CHECK(*s.energy_joules == doctest::Approx(400));
}

TEST_CASE("gpu: the idle guard trips after the window, and a busy interval resets it") {
  std::optional<double> since;
  CHECK_FALSE(idle_gpu_update(since, 1, 0.01, 0.05, 3));
  CHECK_FALSE(idle_gpu_update(since, 2, std::nullopt, 0.05, 3));  // unmeasured: no change
  CHECK_FALSE(idle_gpu_update(since, 3, 0.5, 0.05, 3));           // busy: reset
  CHECK_FALSE(since);
  CHECK_FALSE(idle_gpu_update(since, 4, 0.0, 0.05, 3));
  CHECK_FALSE(idle_gpu_update(since, 6, 0.0, 0.05, 3));
  CHECK(idle_gpu_update(since, 7, 0.0, 0.05, 3));
}

}  // namespace spendcap
