#!/usr/bin/env bash
# The device check (issue 20 item 9): spendcap's GPU figures against a real NVIDIA driver, in
# under 5 minutes, on a machine with an NVIDIA GPU and PyTorch (no CUDA toolkit needed).
#
#   scripts/gpu_check.sh           the device check below (SPENDCAP=binary, default build/spendcap)
#   scripts/gpu_check.sh --all     then the earlier checks too (process facts, integration tests,
#                                  CUDA jobs stopped by a budget; longer than 5 minutes)
#
# Runs a CUDA job (PyTorch) at known duty cycles under spendcap: busy, about 50% busy, and idle
# holding memory; compares the measured utilisation to the duty cycle (within 5 points; nvidia-smi
# reads the same counters, so it is a cross-check, not the truth), the energy to the delta of the
# driver's energy counter over the job's life (within 2%), checks that the idle guard stops only
# the idle job, and shows which pid NVML reports for a CUDA context made on a non-main thread.
# Prints a table, and exits 1 when a check fails. Uses GPU 0 (CUDA_VISIBLE_DEVICES=0 with
# CUDA_DEVICE_ORDER=PCI_BUS_ID, so CUDA's 0 is NVML's 0).
set -euo pipefail
cd "$(dirname "$0")/.."

SPENDCAP=${SPENDCAP:-build/spendcap}
PYTHON=${PYTHON:-python3}
[ -x "$SPENDCAP" ] || { echo "gpu_check: no spendcap binary at $SPENDCAP (build it, or name it)" >&2; exit 2; }
"$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' ||
  { echo "gpu_check: PyTorch with CUDA is needed ($PYTHON -c 'import torch')" >&2; exit 2; }

WORK=$(mktemp -d /tmp/gpu_check.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
status=0
export CUDA_VISIBLE_DEVICES=0 CUDA_DEVICE_ORDER=PCI_BUS_ID

# The job: busy for DUTY of every 200 ms period for SECONDS, memory held throughout; with
# "thread", the CUDA context is made on a non-main thread and the pids are reported.
cat > "$WORK/duty.py" <<'PY'
import os
import sys
import threading
import time

import torch

duty, seconds = float(sys.argv[1]), float(sys.argv[2])
mode = sys.argv[3] if len(sys.argv) > 3 else "main"


def work():
    x = torch.randn(4096, 4096, device="cuda")
    held = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")  # 256 MiB held
    torch.cuda.synchronize()
    end = time.monotonic() + seconds
    period = 0.2
    while time.monotonic() < end:
        start = time.monotonic()
        while time.monotonic() - start < duty * period:
            y = x @ x
            torch.cuda.synchronize()
        rest = period - (time.monotonic() - start)
        if rest > 0:
            time.sleep(rest)
    del held


if mode == "thread":
    t = threading.Thread(target=work)
    t.start()
    time.sleep(3)
    print("pid %d thread %d" % (os.getpid(), t.native_id), flush=True)
    with open(os.environ["GPU_CHECK_PIDS"], "w") as f:
        f.write("%d %d\n" % (os.getpid(), t.native_id))
    t.join()
else:
    work()
PY

# NVML read directly (ctypes): the energy counter, and the compute processes' pids.
cat > "$WORK/nvml.py" <<'PY'
import ctypes
import sys

nvml = ctypes.CDLL("libnvidia-ml.so.1")
assert nvml.nvmlInit_v2() == 0
device = ctypes.c_void_p()
assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(device)) == 0
if sys.argv[1] == "energy":
    mj = ctypes.c_ulonglong()
    rc = nvml.nvmlDeviceGetTotalEnergyConsumption(device, ctypes.byref(mj))
    print(mj.value if rc == 0 else "none")
else:
    class Info(ctypes.Structure):
        _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                    ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]
    infos = (Info * 64)()
    count = ctypes.c_uint(64)
    rc = nvml.nvmlDeviceGetComputeRunningProcesses_v3(device, ctypes.byref(count), infos)
    print(" ".join(str(infos[i].pid) for i in range(count.value)) if rc == 0 else "error %d" % rc)
PY

cat > "$WORK/policy.json" <<'JSON'
{"guards": {"idle_gpu": {"below_percent": 5, "for": "20s"}}}
JSON

energy() { "$PYTHON" "$WORK/nvml.py" energy; }

# run NAME DUTY SECONDS: the job under spendcap; the status file and the counter's delta kept.
run() {
  local name=$1 duty=$2 seconds=$3 before after rc=0
  before=$(energy)
  "$SPENDCAP" run --policy "$WORK/policy.json" --budget 5 --rate 1 \
    --status-file "$WORK/$name.json" -- "$PYTHON" "$WORK/duty.py" "$duty" "$seconds" \
    2> "$WORK/$name.err" || rc=$?
  after=$(energy)
  echo "$rc $before $after" > "$WORK/$name.meta"
}

run busy 1.0 30
run half 0.5 30
run idle 0.0 60
GPU_CHECK_PIDS="$WORK/thread.pids" run thread 0.5 10 &
sleep 6
NVML_PIDS=$("$PYTHON" "$WORK/nvml.py" pids)
wait

WORK="$WORK" NVML_PIDS="$NVML_PIDS" "$PYTHON" - <<'PY' || status=1
import json
import os
import sys

work = os.environ["WORK"]
failed = False
print("%-8s %-6s %-10s %-12s %-14s %-14s %-8s %s" % (
    "job", "exit", "duty", "measured", "energy (J)", "counter (J)", "energy", "verdict"))
expected = {"busy": (1.0, 0), "half": (0.5, 0), "idle": (0.0, 123), "thread": (0.5, 0)}
for name, (duty, exit_expected) in expected.items():
    with open(os.path.join(work, name + ".meta")) as f:
        rc, before, after = f.read().split()
    with open(os.path.join(work, name + ".json")) as f:
        gpu = json.load(f).get("gpu", {})
    measured = gpu.get("mean_utilisation")
    joules = gpu.get("energy_joules")
    counter = (int(after) - int(before)) / 1000.0 if before != "none" else None
    checks = [int(rc) == exit_expected]
    if name != "idle":
        checks.append(measured is not None and abs(measured - duty) <= 0.05)
    if joules is not None and counter:
        checks.append(abs(joules - counter) <= 0.02 * counter)
    ok = all(checks)
    failed = failed or not ok
    print("%-8s %-6s %-10.2f %-12s %-14s %-14s %-8s %s" % (
        name, rc, duty, "%.3f" % measured if measured is not None else "none",
        "%.1f" % joules if joules is not None else "none",
        "%.1f" % counter if counter is not None else "none",
        "%.2f%%" % (100 * (joules - counter) / counter) if joules and counter else "-",
        "ok" if ok else "FAILED"))
with open(os.path.join(work, "thread.pids")) as f:
    pid, thread = f.read().split()
nvml_pids = os.environ["NVML_PIDS"].split()
print("CUDA context on a non-main thread: process %s, thread %s; NVML lists %s -> %s" % (
    pid, thread, " ".join(nvml_pids) or "nothing",
    "the process's pid" if pid in nvml_pids else
    ("the thread's id" if thread in nvml_pids else "neither")))
sys.exit(1 if failed else 0)
PY

[ "${1:-}" = --all ] || exit $status

# ---- the earlier checks (kept as they were) ----
set +e
out=${OUT:-/tmp}
export SPENDCAP_BIN=$PWD/build/spendcap XDG_DATA_HOME=/tmp/gpu-check XDG_STATE_HOME=/tmp/gpu-check
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER
mkdir -p /tmp/gpu-check
{
  echo "== machine"
  uname -a; id; nproc
  echo "cgroup: $(cat /proc/self/cgroup | tr '\n' ' ')"
  grep -E " - cgroup2? " /proc/self/mountinfo | awk '{print $5, $(NF-2)}'
  ls /proc/self/task/*/children >/dev/null 2>&1 && echo "children files: yes" || echo "children files: no"
  nvidia-smi -L
  ./build/spendcap --version

  echo "== integration tests"
  (cd tests/integration && timeout 300 python3 -m unittest test_run_basics test_kill_path \
     test_signals test_spend 2>&1 | grep -E "^(test_|FAIL|ERROR|Ran|OK|FAILED|AssertionError|  File)" )

  for mode in checkpoint ignore-signals; do
    echo "== a CUDA job (40 GiB, busy) stopped by its budget: $mode"
    rm -f /tmp/gpu-check/ready /tmp/gpu-check/ckpt.pt /tmp/gpu-check/status.json
    flags=(); [ "$mode" = ignore-signals ] && flags=(--ignore-signals)
    # 3600/h is 1 USD a second; with grace 5s, kill-after 2s and 1 s of slack the reserve is 8:
    # a budget of 30 trips 22 s in, well after CUDA has started.
    timeout 120 ./build/spendcap run --rate 3600 --budget 30 --grace 5s --kill-after 2s \
      --status-file /tmp/gpu-check/status.json -- python3 tests/fixtures/cuda_job.py \
      --checkpoint /tmp/gpu-check/ckpt.pt --ready /tmp/gpu-check/ready "${flags[@]}" 2>&1 |
      grep -v "cuda_job: step"
    echo "exit ${PIPESTATUS[0]}"
    python3 -c "import json; s=json.load(open('/tmp/gpu-check/status.json')); print({k: s[k] for k in ('reason','spend','checkpoint_signalled','grace_skipped','tripped_after_seconds','trip_to_empty_seconds','tree_tracking')})"
    ls -la /tmp/gpu-check/ckpt.pt 2>/dev/null
    nvidia-smi --query-gpu=memory.used --format=csv,noheader
  done

  echo "== GPU measurement through the real NVML: a busy CUDA job, against nvidia-smi"
  rm -f /tmp/gpu-check/ready /tmp/gpu-check/status.json
  nvidia-smi --query-gpu=index,uuid,utilization.gpu,power.draw,total_energy_consumption \
    --format=csv,noheader
  (timeout 60 nvidia-smi --query-gpu=utilization.gpu,power.draw --format=csv,noheader -lms 1000 \
     > /tmp/gpu-check/smi.csv &)
  timeout 120 ./build/spendcap run --rate 36 --budget 5 --status-file /tmp/gpu-check/status.json \
    -- timeout 20 python3 tests/fixtures/cuda_job.py --checkpoint /tmp/gpu-check/ckpt.pt \
    --ready /tmp/gpu-check/ready 2>&1 | grep -v "cuda_job: step"
  python3 -c "import json; print(json.dumps(json.load(open('/tmp/gpu-check/status.json')).get('gpu'), indent=1))"
  nvidia-smi --query-gpu=total_energy_consumption --format=csv,noheader
  echo "nvidia-smi during the run (utilization, power):"; cat /tmp/gpu-check/smi.csv | head -30
} 2>&1 | tee "$out/gpu_check.log"
exit $status
