#include <doctest/doctest.h>
#include <unistd.h>

#include "spendcap/gpu/account.hpp"

namespace spendcap {

namespace {

constexpr unsigned long long kS = 1'000'000;

// A probe whose figures the test sets between polls; it answers as the driver does (only samples
// newer than lastSeen, NOT_FOUND when there are none).
class FakeProbe final : public GpuProbe {
 public:
  std::vector<GpuDevice> list = {{0, "GPU-a", "A100"}, {1, "GPU-b", "A100"}};
  std::map<unsigned, std::vector<unsigned>> pids, mps;
  std::map<unsigned, std::vector<GpuProcessSample>> samples;
  std::map<unsigned, std::vector<GpuDeviceSample>> device;
  GpuStatus per_process = GpuStatus::ok;
  std::map<unsigned, double> gpm;
  std::map<unsigned, unsigned long long> energy;
  std::map<unsigned, unsigned> power;
  std::vector<std::string> missing;
  int power_reads = 0;

  const std::vector<GpuDevice>& devices() const override { return list; }
  GpuReading<std::vector<unsigned>> processes(unsigned index) override {
    return {GpuStatus::ok, pids[index]};
  }
  GpuReading<std::vector<unsigned>> mps_processes(unsigned index) override {
    return {GpuStatus::ok, mps[index]};
  }
  GpuReading<std::vector<GpuProcessSample>> process_utilisation(unsigned index,
                                                                unsigned long long since) override {
    if (per_process != GpuStatus::ok) return {per_process, {}};
    std::vector<GpuProcessSample> out;
    for (const auto& s : samples[index]) {
      if (s.timestamp_us > since) out.push_back(s);
    }
    return {out.empty() ? GpuStatus::not_found : GpuStatus::ok, out};
  }
  GpuReading<std::vector<GpuDeviceSample>> device_samples(unsigned index,
                                                          unsigned long long since) override {
    if (!device.count(index)) return {GpuStatus::not_supported, {}};
    std::vector<GpuDeviceSample> out;
    for (const auto& s : device[index]) {
      if (s.timestamp_us > since) out.push_back(s);
    }
    return {out.empty() ? GpuStatus::not_found : GpuStatus::ok, out};
  }
  GpuReading<double> slice_utilisation(unsigned index) override {
    if (!gpm.count(index)) return {GpuStatus::not_supported, 0};
    return {GpuStatus::ok, gpm[index]};
  }
  std::optional<unsigned long long> energy_mj(unsigned index) override {
    if (!energy.count(index)) return std::nullopt;
    return energy[index];
  }
  std::optional<unsigned> power_mw(unsigned index) override {
    ++power_reads;
    if (!power.count(index)) return std::nullopt;
    return power[index];
  }
  std::optional<unsigned> find_uuid(const std::string& uuid) override {
    std::optional<unsigned> match;
    for (const GpuDevice& d : list) {
      if (d.uuid.compare(0, uuid.size(), uuid) == 0) {
        if (match) return std::nullopt;
        match = d.index;
      }
    }
    return match;
  }
  std::vector<std::string> notes() const override { return missing; }
};

const unsigned kSelf = static_cast<unsigned>(::getpid());

GpuAllocation cuda(std::vector<std::string> entries, bool pci = false) {
  GpuAllocation a;
  a.entries = std::move(entries);
  a.source = "CUDA_VISIBLE_DEVICES";
  a.pci_order = pci;
  return a;
}

bool has_note(const GpuSummary& s, const std::string& part) {
  for (const auto& n : s.notes) {
    if (n.find(part) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("gpu: allocated devices come from CUDA_VISIBLE_DEVICES, else Slurm") {
  const char* cuda_env[] = {"A=1", "CUDA_VISIBLE_DEVICES=0, GPU-b", "SLURM_STEP_GPUS=3", nullptr};
  CHECK(allocated_gpus_from_environment(cuda_env) == std::vector<std::string>{"0", "GPU-b"});
  CHECK_FALSE(gpu_allocation_from_environment(cuda_env).pci_order);
  const char* ordered[] = {"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=1", nullptr};
  CHECK(gpu_allocation_from_environment(ordered).pci_order);
  const char* slurm[] = {"SLURM_JOB_GPUS=2,3", nullptr};
  CHECK(allocated_gpus_from_environment(slurm) == std::vector<std::string>{"2", "3"});
  CHECK(gpu_allocation_from_environment(slurm).pci_order);
  const char* none[] = {"CUDA_VISIBLE_DEVICES=NoDevFiles", nullptr};
  CHECK(allocated_gpus_from_environment(none).empty());
  const char* nothing[] = {nullptr};
  CHECK(allocated_gpus_from_environment(nothing).empty());
}

TEST_CASE("gpu: device matching by UUID, prefix, MIG forms; CUDA indices only where safe") {
  FakeProbe probe;
  probe.list = {{0, "GPU-aaaa-1", "H100"}, {1, "GPU-bbbb-2", "A100"}};
  GpuDevice slice;
  slice.index = 2;
  slice.uuid = "MIG-cccc-3";
  slice.parent = 0;
  slice.gpu_instance = 1;
  slice.compute_instance = 0;
  probe.list.push_back(slice);
  std::vector<std::string> notes;
  CHECK(resolve_allocation(cuda({"GPU-bbbb-2"}), probe, notes) == std::set<unsigned>{1});
  CHECK(resolve_allocation(cuda({"GPU-aa"}), probe, notes) == std::set<unsigned>{0});
  CHECK(resolve_allocation(cuda({"MIG-cccc-3"}), probe, notes) == std::set<unsigned>{2});
  CHECK(resolve_allocation(cuda({"MIG-GPU-aaaa-1/1/0"}), probe, notes) == std::set<unsigned>{2});
  CHECK(notes.empty());
  // Unlike GPUs, CUDA's default order: index 1 is not resolved, and said.
  CHECK(resolve_allocation(cuda({"1"}), probe, notes).empty());
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].find("not resolved") != std::string::npos);
  CHECK(resolve_allocation(cuda({"1"}, true), probe, notes) == std::set<unsigned>{1});
  // A prefix naming two devices, and a UUID nobody has.
  notes.clear();
  CHECK(resolve_allocation(cuda({"GPU-", "GPU-zzzz"}), probe, notes).empty());
  CHECK(notes.size() == 2);
  // Identical GPUs: the index is the same either way.
  probe.list[1].model = "H100";
  notes.clear();
  CHECK(resolve_allocation(cuda({"1"}), probe, notes) == std::set<unsigned>{1});
  // --gpus N with fewer identified.
  GpuAllocation counted = cuda({"0"}, true);
  counted.count = 2;
  notes.clear();
  resolve_allocation(counted, probe, notes);
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].find("--gpus 2: 1 of the run's GPUs are not identified") != std::string::npos);
}

TEST_CASE("gpu: the /proc of this process is its own") {
  CHECK(proc_is_ours());
}

TEST_CASE("gpu: per-process samples and the energy counter give busy time and energy") {
  FakeProbe probe;
  probe.pids[1] = {kSelf};
  probe.energy[1] = 1000;
  GpuAccount account(probe, {});
  unsigned long long launch = 100 * kS;
  account.sample(0, {::getpid()}, launch);
  CHECK(account.has_devices());
  // Driver samples at +1 s and +2 s: 50% then 100%; the run's pid has its newest only (+2 s),
  // plus the device's own samples.
  probe.device[1] = {{launch + kS, 50}, {launch + 2 * kS, 100}};
  probe.samples[1] = {{kSelf, launch + 2 * kS, 100}};
  probe.energy[1] = 1000 + 300'000;  // 300 J
  account.sample(2, {::getpid()}, launch + 2 * kS);
  GpuSummary s = account.summary();
  CHECK(s.devices == std::vector<std::string>{"1 (GPU-b)"});  // device 0 is not the run's
  CHECK(s.allocated_seconds == doctest::Approx(2));
  // (0, 1] and (1, 2]: the pid's newest sample speaks for both.
  CHECK(s.measured_seconds == doctest::Approx(2));
  REQUIRE(s.busy_seconds);
  CHECK(*s.busy_seconds == doctest::Approx(2));
  REQUIRE(s.energy_joules);
  CHECK(*s.energy_joules == doctest::Approx(300));
  CHECK(s.utilisation_source == "per-process");
  CHECK(s.energy_source == "energy counter");
  CHECK(probe.power_reads == 0);  // power is not read where the counter works
  CHECK_FALSE(s.shared);
  // NOT_FOUND with no fresher device sample: unmeasured, not 0%.
  account.sample(3, {::getpid()}, launch + 3 * kS);
  s = account.summary();
  CHECK(s.allocated_seconds == doctest::Approx(3));
  CHECK(s.measured_seconds == doctest::Approx(2));
  CHECK(has_note(s, "had no fresh driver sample"));
  // The device sampled and the pid had no entry: 0% for that period.
  probe.device[1].push_back({launch + 4 * kS, 0});
  account.sample(4, {::getpid()}, launch + 4 * kS);
  s = account.summary();
  CHECK(s.measured_seconds == doctest::Approx(4));  // (2, 4] at 0
  CHECK(*s.mean_utilisation() == doctest::Approx(0.5));
}

TEST_CASE("gpu: another tenant never lowers the run's share; the idle guard sees the run's own") {
  FakeProbe probe;
  probe.pids[0] = {kSelf, 4194000};
  probe.energy[0] = 0;
  GpuAccount account(probe, cuda({"0"}));
  account.sample(0, {::getpid()}, 10 * kS);
  GpuSummary before = account.summary();
  probe.samples[0] = {{kSelf, 11 * kS, 8}, {4194000, 11 * kS + 5, 90}};
  probe.energy[0] = 980'000;  // 980 J
  account.sample(1, {::getpid()}, 11 * kS);
  GpuSummary s = account.summary();
  CHECK(*s.mean_utilisation() == doctest::Approx(0.08));
  CHECK(s.shared);
  CHECK(*utilisation_between(before, s) == doctest::Approx(0.08));
  CHECK(*s.energy_joules == doctest::Approx(980 * 8.0 / 98));  // by utilisation share
  // Negative control: nothing new, nothing measured: no figure for the guard.
  account.sample(2, {::getpid()}, 12 * kS);
  CHECK_FALSE(utilisation_between(s, account.summary()));
}

TEST_CASE("gpu: what is not measured stays unmeasured, never 0") {
  FakeProbe probe;
  probe.per_process = GpuStatus::not_supported;  // and no device samples, energy or power
  GpuAccount account(probe, cuda({"0"}, true));
  account.sample(0, {}, kS);
  account.sample(1, {}, 2 * kS);
  GpuSummary s = account.summary();
  CHECK(s.allocated_seconds == doctest::Approx(1));
  CHECK_FALSE(s.busy_seconds);
  CHECK_FALSE(s.mean_utilisation());
  CHECK_FALSE(s.energy_joules);
  CHECK(s.energy_source.empty());
}

TEST_CASE("gpu: device-level from the device's samples, integrated power, a shared device") {
  FakeProbe probe;
  probe.per_process = GpuStatus::no_permission;
  probe.pids[0] = {kSelf, 4194000};  // someone else's process too
  probe.device[0] = {{kS + kS / 2, 20}, {2 * kS, 60}, {5 * kS, 40}};
  probe.power[0] = 200'000;  // 200 W
  GpuAccount account(probe, cuda({"GPU-a"}));
  account.sample(0, {::getpid()}, kS);
  account.sample(4, {::getpid()}, 5 * kS);
  GpuSummary s = account.summary();
  CHECK(s.utilisation_source == "device-level");
  // 0.5 s at 20%, 0.5 s at 60%, 3 s at 40%: over the interval, not one point reading.
  CHECK(s.measured_seconds == doctest::Approx(4));
  CHECK(*s.busy_seconds == doctest::Approx(0.1 + 0.3 + 1.2));
  CHECK(s.energy_source == "integrated power");
  CHECK(s.shared);
  CHECK(has_note(s, "device-level (per-process utilisation: no permission)"));
  // Without per-process figures the share is by process count: half of 800 J.
  CHECK(*s.energy_joules == doctest::Approx(400));
}

TEST_CASE("gpu: MIG slices by GPM, and the parent's energy is not charged to a slice") {
  FakeProbe probe;
  probe.list = {{0, "GPU-a", "A100"}};
  probe.list[0].mig_parent = true;
  GpuDevice slice;
  slice.index = 1;
  slice.uuid = "MIG-x";
  slice.parent = 0;
  probe.list.push_back(slice);
  probe.pids[1] = {kSelf};
  probe.gpm[1] = 40;
  probe.energy[0] = 0;
  GpuAccount account(probe, cuda({"MIG-x"}));
  account.sample(0, {::getpid()}, kS);
  account.sample(2, {::getpid()}, 3 * kS);
  GpuSummary s = account.summary();
  CHECK(s.devices == std::vector<std::string>{"1 (MIG-x)"});
  CHECK(*s.mean_utilisation() == doctest::Approx(0.4));
  CHECK(s.utilisation_source == "GPM (MIG slice)");
  CHECK_FALSE(s.energy_joules);
  CHECK(has_note(s, "energy not measured (the energy counter is the whole GPU's)"));
  // Without GPM: unmeasured, and said.
  probe.gpm.clear();
  GpuAccount without(probe, cuda({"MIG-x"}));
  without.sample(0, {::getpid()}, kS);
  without.sample(2, {::getpid()}, 3 * kS);
  s = without.summary();
  CHECK_FALSE(s.busy_seconds);
  CHECK(has_note(s, "no GPM"));
}

TEST_CASE("gpu: behind MPS, samples carrying only the server's pid leave the run unmeasured") {
  FakeProbe probe;
  probe.pids[0] = {777};  // the MPS server
  probe.mps[0] = {kSelf};
  probe.samples[0] = {{777, 2 * kS, 60}};
  GpuAccount account(probe, {});
  account.sample(0, {::getpid()}, kS);
  account.sample(1, {::getpid()}, 2 * kS);
  GpuSummary s = account.summary();
  CHECK(s.devices.size() == 1);
  CHECK_FALSE(s.busy_seconds);
  CHECK(has_note(s, "MPS clients"));
  // Samples that do carry the run's pid are the run's.
  probe.samples[0].push_back({kSelf, 3 * kS, 30});
  account.sample(2, {::getpid()}, 3 * kS);
  CHECK(*account.summary().mean_utilisation() == doctest::Approx(0.3));
}

TEST_CASE("gpu: a lost GPU is unmeasured from then on, and said") {
  FakeProbe probe;
  probe.pids[0] = {kSelf};
  probe.samples[0] = {{kSelf, 2 * kS, 50}};
  GpuAccount account(probe, cuda({"0"}, true));
  account.sample(0, {::getpid()}, kS);
  account.sample(1, {::getpid()}, 2 * kS);
  probe.per_process = GpuStatus::gpu_lost;  // and no device samples
  account.sample(5, {::getpid()}, 6 * kS);
  GpuSummary s = account.summary();
  CHECK(s.allocated_seconds == doctest::Approx(5));
  CHECK(s.measured_seconds == doctest::Approx(1));
  CHECK(*s.mean_utilisation() == doctest::Approx(0.5));
  CHECK(has_note(s, "GPU 0 was lost (GPU_IS_LOST)"));
}

TEST_CASE("gpu: the idle guard trips after the window, and a busy interval resets it") {
  std::optional<double> since;
  CHECK_FALSE(idle_gpu_update(since, 1, 0.01, 0.05, 3));
  CHECK_FALSE(idle_gpu_update(since, 2, std::nullopt, 0.05, 3));  // unmeasured: no change
  CHECK_FALSE(idle_gpu_update(since, 3, 0.5, 0.05, 3));           // busy: reset
  CHECK_FALSE(since);
  CHECK_FALSE(idle_gpu_update(since, 4, 0.0, 0.05, 3));
  CHECK_FALSE(idle_gpu_update(since, 6, 0.0, 0.05, 3));
  CHECK_FALSE(idle_gpu_update(since, 7.5, std::nullopt, 0.05, 3));  // never on an unmeasured one
  CHECK(idle_gpu_update(since, 7.5, 0.0, 0.05, 3));
}

}  // namespace spendcap
