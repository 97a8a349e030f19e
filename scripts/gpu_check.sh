#!/usr/bin/env bash
# Checks on a machine with an NVIDIA GPU, with a prebuilt build/spendcap (static but for libc):
# the machine's process facts, the integration tests that need no compiler, and real CUDA jobs
# stopped by a budget: how long a GPU process takes from the trip to reaped, with and without a
# checkpoint, against the 1 s of reaping slack the reserve assumes. Writes its log to $OUT or /tmp.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}
export SPENDCAP_BIN=$PWD/build/spendcap XDG_DATA_HOME=/tmp/gpu-check XDG_STATE_HOME=/tmp/gpu-check
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
