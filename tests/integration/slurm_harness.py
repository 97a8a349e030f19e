"""A real single-node Slurm for the tests (issue 13, test 1): munged, slurmctld and slurmd from
Debian's slurm-wlm 22.05, each started in the foreground by the test with files of its own (a munge
key and socket, a slurm.conf passed through SLURM_CONF, state and spool directories, free ports),
proctrack/linuxproc and no systemd. stop() cancels every job first and waits for the queue to be
empty (or slurmstepd lingers), then stops the daemons it started, by their pids.

SlurmCluster.start() raises SlurmUnavailable with the reason when Slurm cannot start here: the
tests skip with it."""
import os
import shutil
import socket
import subprocess
import tempfile
import time

from spendcap_testlib import free_port


class SlurmUnavailable(Exception):
    pass


SLURM_CONF = """\
ClusterName=spendcaptest
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
AuthInfo=socket={dir}/munge/sock
CredType=cred/munge
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
# scancel's SIGTERM, then SIGKILL after KillWait: 30 s, as Slurm's default.
KillWait=30
NodeName={host} CPUs=8 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
"""


class SlurmCluster:
    def __init__(self):
        self.dir = None
        self.processes = []
        self.env = None

    def start(self, timeout=30):
        for tool in ("munged", "slurmctld", "slurmd", "sbatch", "scancel", "squeue", "sinfo"):
            if not shutil.which(tool):
                raise SlurmUnavailable("%s is not installed (Debian: slurm-wlm, munge)" % tool)
        if os.geteuid() != 0:
            raise SlurmUnavailable("slurmd must run as root to start jobs")
        self.dir = tempfile.mkdtemp(prefix="spendcap-slurm-")
        os.chmod(self.dir, 0o755)
        for sub in ("state", "spool", "munge"):
            os.mkdir(os.path.join(self.dir, sub), 0o700)
        key = os.path.join(self.dir, "munge", "key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        host = socket.gethostname().split(".")[0]
        conf = os.path.join(self.dir, "slurm.conf")
        with open(conf, "w") as f:
            f.write(SLURM_CONF.format(host=host, dir=self.dir, ctld_port=free_port(),
                                      d_port=free_port()))
        self.env = dict(os.environ, SLURM_CONF=conf)
        munge = os.path.join(self.dir, "munge")
        self._spawn(["munged", "--foreground", "--force", "--key-file", key,
                     "--socket", os.path.join(munge, "sock"),
                     "--pid-file", os.path.join(munge, "pid"),
                     "--log-file", os.path.join(munge, "log"),
                     "--seed-file", os.path.join(munge, "seed")], "munged")
        self._wait(lambda: os.path.exists(os.path.join(munge, "sock")), 10, "munged's socket")
        self._spawn(["slurmctld", "-D", "-i"], "slurmctld")
        self._spawn(["slurmd", "-D", "-N", host], "slurmd")
        self._wait(self._idle, timeout, "the node to be idle")

    def _spawn(self, argv, name):
        log = open(os.path.join(self.dir, name + ".out"), "w")
        process = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        log.close()
        self.processes.append((name, process))

    def _wait(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        while not predicate():
            for name, process in self.processes:
                if process.poll() is not None:
                    self.stop()
                    raise SlurmUnavailable("%s exited with %s while waiting for %s: %s" % (
                        name, process.returncode, what, self.log_tail(name)))
            if time.monotonic() > deadline:
                tails = "; ".join("%s: %s" % (n, self.log_tail(n)) for n, _ in self.processes)
                self.stop()
                raise SlurmUnavailable("no %s after %ds (%s)" % (what, timeout, tails))
            time.sleep(0.1)

    def log_tail(self, name):
        try:
            with open(os.path.join(self.dir, name + ".out")) as f:
                return " | ".join(f.read().strip().splitlines()[-3:])
        except OSError:
            return "(no log)"

    def _idle(self):
        result = self.run(["sinfo", "-h", "-o", "%T"], check=False)
        return result.returncode == 0 and "idle" in result.stdout

    def run(self, argv, check=True, timeout=30, env=None):
        merged = dict(self.env)
        merged.update(env or {})
        return subprocess.run(argv, env=merged, capture_output=True, text=True, check=check,
                              timeout=timeout)

    def sbatch(self, script, *options, env=None):
        """Submits `script`; returns the job id."""
        result = self.run(["sbatch", "--parsable"] + list(options) + [script], env=env)
        return result.stdout.strip().split(";")[0]

    def queue(self):
        return self.run(["squeue", "-h", "-o", "%i %T"], check=False).stdout.split("\n")

    def job_ended(self, job_id):
        return not any(line.split(" ")[0] == job_id for line in self.queue() if line.strip())

    def stop(self):
        """Cancels every job and waits for the queue to drain, then stops the daemons."""
        if self.env and any(p.poll() is None for n, p in self.processes if n == "slurmctld"):
            self.run(["scancel", "--full", "--signal=KILL", "--user", "root"], check=False)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and any(l.strip() for l in self.queue()):
                time.sleep(0.1)
        for name, process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self.processes = []
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
