"""spendcap_job: a job's side of `spendcap run` (one file, the standard library only).

Copy it next to your training script, or put contrib/python on PYTHONPATH. Outside spendcap
(no SPENDCAP_RUN_ID in the environment) every call is a harmless no-op, so the same script runs
with and without it.

    import spendcap_job

    stop = spendcap_job.on_checkpoint_signal()      # spendcap asks for a checkpoint when it trips
    for step in range(start, total):
        train_one_step()
        spendcap_job.progress(step=step, total_steps=total, metric={"val_loss": loss})
        if stop.is_set():                            # checked between steps, never in the handler
            save_checkpoint()
            spendcap_job.checkpoint_done()           # ends the grace period at once
            break

    spendcap_job.tracker("wandb", wandb.run.id)      # the tracker's run id, once it is known
    wandb.log({"spendcap/left_usd": spendcap_job.left_usd()})

What spendcap gives the job (docs/guide/running-jobs.md#what-the-job-gets): SPENDCAP_RUN_ID,
SPENDCAP_TEAM, SPENDCAP_EXPERIMENT, SPENDCAP_PROJECT, SPENDCAP_BUDGET_USD (unset without a run
budget), SPENDCAP_CHECKPOINT_SIGNAL, SPENDCAP_CHECKPOINT_DONE and SPENDCAP_PROGRESS.
"""
import json
import os
import shutil
import signal
import subprocess
import threading

__all__ = ["run_id", "budget_usd", "progress", "tracker", "on_checkpoint_signal",
           "checkpoint_done", "under_spendcap", "status", "left_usd"]


def under_spendcap():
    """Whether this process runs under `spendcap run`."""
    return bool(os.environ.get("SPENDCAP_RUN_ID"))


def run_id():
    """spendcap's id of this run (a UUID), or None outside spendcap."""
    return os.environ.get("SPENDCAP_RUN_ID") or None


def budget_usd():
    """The run's own budget in USD as a float, or None (no run budget, or outside spendcap)."""
    value = os.environ.get("SPENDCAP_BUDGET_USD")
    return float(value) if value else None


def progress(step=None, total_steps=None, metric=None, units=None, egress_gb=None, **extra):
    """Appends one line to the progress channel ($SPENDCAP_PROGRESS): spendcap prices steps from
    it, projects the total cost, and watches for stalls. `metric` is {"name": number} (the first
    key counts). Returns False outside spendcap. One write of one whole line: a line is never
    interleaved with another writer's."""
    path = os.environ.get("SPENDCAP_PROGRESS")
    if not path:
        return False
    line = dict(extra)
    for key, value in (("step", step), ("total_steps", total_steps), ("metric", metric),
                       ("units", units), ("egress_gb", egress_gb)):
        if value is not None:
            line[key] = value
    data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    return True


def tracker(name, tracker_run_id):
    """Tells spendcap the experiment tracker's run id ("mlflow", "wandb", ...) once the job knows
    it: a progress line {"tracker": {name: id}}. spendcap takes MLFLOW_RUN_ID, WANDB_RUN_ID and
    the like from the environment at launch by itself."""
    return progress(tracker={str(name): str(tracker_run_id)})


def on_checkpoint_signal(callback=None):
    """Installs a handler for the signal spendcap sends when the run trips
    ($SPENDCAP_CHECKPOINT_SIGNAL, SIGUSR1 by default). Returns a threading.Event that is set when
    it comes; the handler only sets it (and calls `callback(signum)` if given), so the training
    loop checkpoints between steps. Only the process that installs a handler is asked: spendcap
    signals the processes that catch the signal and skips the grace when none does. Outside
    spendcap, or with --checkpoint-signal none, nothing is installed and the event never sets.
    Call it from the main thread (Python's rule for signal handlers)."""
    event = threading.Event()
    name = os.environ.get("SPENDCAP_CHECKPOINT_SIGNAL", "")
    if not under_spendcap() or not name or name == "none":
        return event
    number = getattr(signal, name if name.startswith("SIG") else "SIG" + name, None)
    if number is None:
        number = int(name)

    def handler(signum, frame):
        event.set()
        if callback is not None:
            callback(signum)

    signal.signal(number, handler)
    return event


def checkpoint_done():
    """Says the checkpoint is written: spendcap ends the grace period at once instead of waiting
    it out (it creates the file $SPENDCAP_CHECKPOINT_DONE names). Returns False outside
    spendcap."""
    path = os.environ.get("SPENDCAP_CHECKPOINT_DONE")
    if not path:
        return False
    with open(path, "a"):
        pass
    return True


def status(spendcap=None, timeout_seconds=10):
    """The run's record in the ledger as `spendcap show RUN --json` prints it (spend, ceiling,
    budget, status, ...: the last heartbeat's figures, a few seconds old), or None outside
    spendcap or when it cannot be read. `spendcap` is the binary (default: the one on PATH)."""
    rid = run_id()
    binary = spendcap or shutil.which("spendcap")
    if not rid or not binary:
        return None
    try:
        done = subprocess.run([binary, "show", rid, "--json"], capture_output=True, text=True,
                              timeout=timeout_seconds)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    try:
        return json.loads(done.stdout)
    except ValueError:
        return None


def left_usd(spendcap=None):
    """What is left of the run's own budget in USD (budget - spend so far), or None (no run
    budget, outside spendcap, or the ledger could not be read)."""
    record = status(spendcap)
    if not record or record.get("budget") is None or record.get("spend") is None:
        return None
    return record["budget"] - record["spend"]
