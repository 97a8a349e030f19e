#!/usr/bin/env python3
"""The fleet test (issue 33): many hosts, many runs, one set of team budgets, while the ledger
server and the network misbehave; a history of everything, proved by checker.py.

Hosts are network namespaces (each with its own veth pair and, per run, its own UTS namespace and
host name), as in tests/integration/test_postgres_netns.py. Every host reaches one durable
PostgreSQL (scripts/pg-test-server.sh, fsync on, its own directory and port, its WAL on a small
tmpfs) and one webhook receiver (HTTP, counting events by webhook-id) at a common address on the
host's loopback, 10.214.255.1. Each host runs SLOTS slots; a slot starts `spendcap run`s one after
another (short, long, checkpointing and over-run-budget jobs, on two teams and an experiment whose
budgets are sized so that some trip and some refuse) until the run time is over.

Faults come on a schedule that covers every kind, plus (with --random-faults) more at random, all
from the seed (printed): the server restarted (pg_ctl restart -m immediate), stopped (SIGSTOP of
the postmaster and its backends) for longer than a ceiling lasts, a host cut off (its link down,
or its packets dropped: bogus permanent neighbour entries) for less and for more than a ceiling,
the WAL disk full (the tmpfs filled, a WAL switch forced), wrappers SIGKILLed, a host's every
process SIGKILLed at once (a node crash), the webhook receiver down and back.

An observer reads the ledger once a second (one statement: a consistent snapshot) and the hosts'
spool directories, and logs what changed: heartbeats, grants, final rows, outbox entries, spooled
and replayed rows. After the run time the harness lets every run end, reconciles and replays
(`spendcap ps` on each host), flushes the outbox (`spendcap outbox flush`), checks that nothing
of any tree is left, dumps the ledger, and runs checker.py over the history.

    sudo tests/fleet/fleet.py --hosts 2 --slots 10 --duration 75 --seed 7 --out /tmp/fleet

Exit: 0 when every invariant held, 1 when one failed, 77 when it cannot run here (not root, no
ip netns, no PostgreSQL server binaries): the reason is printed.
"""
import argparse
import http.server
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import checker  # noqa: E402

SERVER_SCRIPT = os.path.join(REPO, "scripts", "pg-test-server.sh")
PG_BIN = os.environ.get("SPENDCAP_PG_BIN", "/usr/lib/postgresql/15/bin")
COMMON = "10.214.255.1"  # the server's and the receiver's address, on the host's loopback
NET = "10.214.%d.%d"
MARKER = "SPENDCAP_FLEET_MARKER"
SKIP = 77
RATE = 36.0  # USD an hour: 0.01 a second
SCHEMA = "fleet"


def why_not_here():
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth pairs, a tmpfs for the WAL)"
    for tool in ("ip", "unshare", "runuser", "psql", "mount"):
        if not shutil.which(tool):
            return "needs %s" % tool
    if not os.path.exists(os.path.join(PG_BIN, "pg_ctl")):
        return "no PostgreSQL server binaries in %s" % PG_BIN
    name = "scfprobe%d" % os.getpid()
    try:
        for command in (["ip", "netns", "add", name],
                        ["ip", "link", "add", name + "a", "type", "veth", "peer", "name",
                         name + "b"]):
            done = subprocess.run(command, capture_output=True, text=True, timeout=30)
            if done.returncode != 0:
                return "cannot create %s here: %s" % (command[2], done.stderr.strip())
    finally:
        for command in (["ip", "link", "del", name + "a"], ["ip", "netns", "del", name]):
            subprocess.run(command, capture_output=True, timeout=30)
    # The WAL's small disk is a tmpfs: a container may refuse the mount.
    probe = tempfile.mkdtemp(prefix="spendcap-fleet-probe-")
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", probe],
                              capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            return "cannot mount a tmpfs here: %s" % done.stderr.strip()
        subprocess.run(["umount", probe], capture_output=True, timeout=30)
    finally:
        os.rmdir(probe)
    return ""


class History:
    """The history: one JSON object a line, each with its wall-clock time `t` (the server's clock
    is this machine's)."""

    def __init__(self, path):
        self.file = open(path, "w")
        self.lock = threading.Lock()
        self.records = []

    def log(self, kind, **fields):
        record = dict(t=round(time.time(), 4), kind=kind, **fields)
        with self.lock:
            self.records.append(record)
            self.file.write(json.dumps(record, sort_keys=True) + "\n")
            self.file.flush()
        return record

    def close(self):
        self.file.close()


class Receiver:
    """A webhook receiver on COMMON:port, logging each POST's webhook-id; down() closes its
    socket (connections are refused), up() listens again."""

    def __init__(self, history, port):
        self.history, self.port, self.server, self.thread = history, port, None, None
        self.lock = threading.Lock()

    def up(self):
        history = self.history

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                try:
                    payload = json.loads(body)
                except ValueError:
                    payload = {}
                history.log("webhook", webhook_id=self.headers.get("webhook-id"),
                            event=payload.get("event"), run_id=payload.get("run_id"),
                            event_id=payload.get("event_id"))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        with self.lock:
            http.server.ThreadingHTTPServer.allow_reuse_address = True
            self.server = http.server.ThreadingHTTPServer((COMMON, self.port), Handler)
            self.server.daemon_threads = True
            self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
            self.thread.start()

    def down(self):
        with self.lock:
            if self.server:
                self.server.shutdown()
                self.server.server_close()
                self.server = None


def run_quiet(command, timeout=60, check=False, **kwargs):
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, **kwargs)
    if check and done.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(command), done.stderr.strip()))
    return done


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            text = f.read()
    except OSError:
        return False
    return chr(text[text.rindex(b")") + 2]) not in "ZX"


def marked_processes(marker):
    needle = ("%s=%s" % (MARKER, marker)).encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/environ" % entry, "rb") as f:
                    if needle in f.read().split(b"\0") and alive(int(entry)):
                        found.append(int(entry))
            except OSError:
                pass
    return found


def children_of(pid):
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry, "rb") as f:
                    text = f.read()
                if int(text[text.rindex(b")") + 2:].split()[1]) == pid:
                    found.append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return found


class Fleet:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)  # the runs' choices (their order depends on timing)
        # The fault plan's own: the same seed gives the same faults, in the same order, whatever
        # the runs drew before the plan was made.
        self.fault_rng = random.Random(args.seed * 7919 + 1)
        self.out = os.path.abspath(args.out)
        shutil.rmtree(self.out, ignore_errors=True)
        os.makedirs(self.out)
        os.chmod(self.out, 0o755)  # the server runs as user postgres, whatever root's umask
        self.tag = "scf%x" % (os.getpid() & 0xfff)
        self.marker = "%s-%d" % (self.tag, args.seed)
        self.history = History(os.path.join(self.out, "history.jsonl"))
        self.port = args.pg_port
        self.pg_dir = os.path.join(self.out, "pg")
        self.wal_disk = os.path.join(self.out, "wal-disk")
        self.server_env = dict(
            os.environ, SPENDCAP_PG_DIR=self.pg_dir, SPENDCAP_PG_PORT=str(self.port),
            SPENDCAP_PG_TRUST="10.214.0.0/16", SPENDCAP_PG_LISTEN=COMMON, SPENDCAP_PG_FSYNC="on",
            SPENDCAP_PGBOUNCER="0",
            SPENDCAP_PG_WALDIR=os.path.join(self.wal_disk, "pg_wal"),
            SPENDCAP_PG_MAX_CONNECTIONS=str(max(100, args.hosts * args.slots * 2 + 40)),
            SPENDCAP_PG_OPTIONS="-c wal_recycle=off -c max_wal_size=32MB -c min_wal_size=32MB")
        self.url = "postgresql://postgres@%s:%d/postgres?options=-csearch_path%%3D%s" % (
            COMMON, self.port, SCHEMA)
        self.hook_port = args.hook_port
        self.receiver = Receiver(self.history, self.hook_port)
        self.cleanups = []
        self.lock = threading.Lock()
        self.running = {}  # label -> (host, Popen)
        self.host_paused = {}
        self.deadline = 0.0
        self.faults_done = False
        self.counter = 0
        self.spendcap = args.spendcap
        self.defaults = {"grace": "2s", "kill_after": "2s", "sync": "%ds" % args.sync,
                         "claim_horizon": "%ds" % args.horizon, "interval": "1s"}
        # A ceiling lasts its claim horizon beyond the last grant; the shutdown reserve is the
        # kill path's length at the rate (grace + kill-after + 1 s of reaping).
        self.ceiling_seconds = args.horizon
        self.shutdown_seconds = 2 + 2 + 1

    # ---- setup ----

    def ip(self, *args, check=True):
        return run_quiet(["ip"] + list(args), check=check)

    def setup_network(self):
        # The common address, on the host's loopback (no dummy interfaces on every kernel).
        self.cleanups.append(lambda: self.ip("addr", "del", COMMON + "/32", "dev", "lo",
                                             check=False))
        # A fleet killed before its cleanup (SIGKILL, a CTest timeout) left it: taken over.
        self.ip("addr", "del", COMMON + "/32", "dev", "lo", check=False)
        self.ip("addr", "add", COMMON + "/32", "dev", "lo")
        for n in range(self.args.hosts):
            ns, outside, inside = self.ns(n), self.tag + "h%d" % n, self.tag + "p%d" % n
            self.cleanups.append(lambda ns=ns: self.ip("netns", "del", ns, check=False))
            self.cleanups.append(lambda o=outside: self.ip("link", "del", o, check=False))
            self.ip("netns", "add", ns)
            self.ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            self.ip("link", "set", inside, "netns", ns)
            self.ip("addr", "add", NET % (n, 1) + "/30", "dev", outside)
            self.ip("link", "set", outside, "up")
            for command in (["addr", "add", NET % (n, 2) + "/30", "dev", inside],
                            ["link", "set", inside, "up"], ["link", "set", "lo", "up"],
                            ["route", "add", COMMON + "/32", "via", NET % (n, 1)]):
                self.ip("-n", ns, *command)
            home = self.host_dir(n)
            for sub in ("data", "state", "config", "tmp", "runs"):
                os.makedirs(os.path.join(home, sub), exist_ok=True)
            self.host_paused[n] = 0.0

    def ns(self, n):
        return self.tag + "n%d" % n

    def host_dir(self, n):
        return os.path.join(self.out, "hosts", "h%d" % n)

    def hostname(self, n):
        return "fleet-host-%d" % n

    def setup_server(self):
        os.makedirs(self.wal_disk)
        run_quiet(["mount", "-t", "tmpfs", "-o", "size=%dm" % self.args.wal_mb, "tmpfs",
                   self.wal_disk], check=True)
        self.cleanups.append(lambda: run_quiet(["umount", "-l", self.wal_disk]))
        shutil.chown(self.wal_disk, "postgres")
        self.cleanups.append(lambda: run_quiet([SERVER_SCRIPT, "stop"], env=self.server_env,
                                               timeout=120))
        run_quiet([SERVER_SCRIPT, "start"], env=self.server_env, timeout=180, check=True)
        # The server's log is kept beside the history (the server's directory goes at the end).
        self.cleanups.append(lambda: shutil.copy(os.path.join(self.pg_dir, "server.log"),
                                                 os.path.join(self.out, "server.log")))
        policy = {"defaults": self.defaults, "budgets": self.budgets()}
        self.policy_path = os.path.join(self.out, "policy.json")
        with open(self.policy_path, "w") as f:
            json.dump({"defaults": self.defaults}, f)
        owner_policy = os.path.join(self.out, "budgets.json")
        with open(owner_policy, "w") as f:
            json.dump(policy, f)
        done = run_quiet([self.spendcap, "budgets", "apply", "--ledger",
                          self.url.replace(COMMON, "127.0.0.1"), owner_policy], timeout=120,
                         env=self.base_env(0))
        if done.returncode != 0:
            raise RuntimeError("budgets apply: " + done.stderr)
        self.history.log("config", seed=self.args.seed, hosts=self.args.hosts,
                         slots=self.args.slots, duration=self.args.duration, rate=RATE,
                         ceiling_seconds=self.ceiling_seconds,
                         shutdown_seconds=self.shutdown_seconds, sync=self.args.sync,
                         budgets=[{"kind": k, "name": n, "amount_micros": int(round(v * 1e6))}
                                  for k, names in self.budgets().items()
                                  for n, v in ((n, b["amount"]) for n, b in names.items())])

    def budgets(self):
        # Demand: every slot spends RATE for the run time. Team alpha's budget is half of what
        # its slots could spend (trips, then refusals); the experiment `sweep` (team beta) half
        # of its slots'; team beta as a whole has room (a fleet that trips everything proves
        # nothing about the runs that should go on).
        per_slot = RATE / 3600.0 * self.args.duration
        slots = self.args.hosts * self.args.slots
        alpha, sweep, beta = 0.4 * slots, 0.3 * slots, 0.6 * slots
        return {"team": {"alpha": {"amount": round(0.5 * alpha * per_slot, 2), "period": "total"},
                         "beta": {"amount": round(1.3 * beta * per_slot, 2), "period": "total"}},
                "experiment": {"sweep": {"amount": round(0.5 * sweep * per_slot, 2),
                                         "period": "total"}}}

    def base_env(self, n):
        home = self.host_dir(n)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPENDCAP_")}
        env.update({"XDG_DATA_HOME": os.path.join(home, "data"),
                    "XDG_STATE_HOME": os.path.join(home, "state"),
                    "XDG_CONFIG_HOME": os.path.join(home, "config"),
                    "TMPDIR": os.path.join(home, "tmp"), MARKER: self.marker})
        return env

    def on_host(self, n, argv):
        """argv run inside host n: its network namespace and a UTS namespace with its name."""
        return ["ip", "netns", "exec", self.ns(n), "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', self.hostname(n)] + list(argv)

    # ---- runs ----

    def choose_run(self):
        kind = self.rng.choices(["short", "long", "checkpoint", "overrun"], [4, 2, 2, 2])[0]
        scope = self.rng.choices(["alpha", "beta", "sweep"], [4, 3, 3])[0]
        args = ["--team", "alpha" if scope == "alpha" else "beta"]
        if scope == "sweep":
            args += ["--experiment", "sweep"]
        if kind == "short":
            job = ["sleep", "%.1f" % self.rng.uniform(1, 5)]
        elif kind == "long":
            job = ["sleep", str(self.rng.randint(15, 30))]
        elif kind == "checkpoint":
            args += ["--budget", "0.12"]
            job = ["sh", "-c", 'trap \'touch "$SPENDCAP_CHECKPOINT_DONE"; exit 0\' USR1; '
                   'sleep 60 & wait']
        else:
            args += ["--budget", "0.15"]
            job = ["sleep", "120"]
        return kind, scope, args, job

    def slot(self, n, s):
        while time.time() < self.deadline or not self.faults_done:
            pause = self.host_paused[n] - time.time()
            if pause > 0:
                time.sleep(pause)
                continue
            with self.lock:
                self.counter += 1
                label = "h%d-s%d-r%d" % (n, s, self.counter)
            kind, scope, args, job = self.choose_run()
            status_file = os.path.join(self.host_dir(n), "runs", label + ".json")
            err_path = os.path.join(self.host_dir(n), "runs", label + ".err")
            argv = self.on_host(n, [
                self.spendcap, "run", "--policy", self.policy_path, "--ledger", self.url,
                "--rate", "%g" % RATE, "--tag", "fleet=" + label, "--status-file", status_file,
                "--webhook", "http://%s:%d/hook" % (COMMON, self.hook_port), "--quiet"] + args +
                ["--"] + job)
            with open(err_path, "w") as err:
                process = subprocess.Popen(argv, env=self.base_env(n), cwd=self.host_dir(n),
                                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                           stderr=err)
            with self.lock:
                self.running[label] = (n, process)
            started = time.time()
            self.history.log("run_start", label=label, host=n, slot=s, job=kind, scope=scope,
                             pid=process.pid)
            try:
                rc = process.wait(timeout=self.args.duration + 240)
            except subprocess.TimeoutExpired:
                process.kill()
                rc = process.wait()
                self.history.log("harness_killed", label=label)
            with self.lock:
                self.running.pop(label, None)
            status = None
            try:
                with open(status_file) as f:
                    status = json.load(f)
            except (OSError, ValueError):
                pass
            with open(err_path) as f:
                stderr = f.read()
            self.history.log("run_end", label=label, host=n, rc=rc,
                             elapsed=round(time.time() - started, 3),
                             run_id=status.get("run_id") if status else None,
                             status=status.get("status") if status else None,
                             reason=status.get("reason") if status else None,
                             spend=status.get("spend") if status else None,
                             spooled="spooled" in stderr, stderr=stderr[-600:])
            if status and str(status.get("reason", "")).startswith("budget"):
                self.history.log("trip", label=label, run_id=status.get("run_id"),
                                 reason=status.get("reason"))
            if rc == 120:
                time.sleep(self.rng.uniform(0.5, 2))  # a refused slot waits a little

    # ---- the observer ----

    SNAPSHOT = ("SELECT json_build_object('now', extract(epoch FROM clock_timestamp()), "
                "'runs', COALESCE((SELECT json_agg(json_build_object('id', id, 'tags', tags, "
                "'host', host, 'team', team, 'experiment', experiment, 'status', status, "
                "'reason', reason, 'exit_code', exit_code, 'spend', spend_micros, "
                "'ceiling', ceiling_micros, 'hb', heartbeat_at, 'reconciled', reconciled, "
                "'started_at', started_at, 'finished_at', finished_at)) FROM %s.runs), '[]'), "
                "'usage', COALESCE((SELECT json_agg(u) FROM %s.usage u), '[]'), "
                "'outbox', COALESCE((SELECT json_agg(json_build_object('id', id, 'event_id', "
                "event_id, 'event', event, 'run_id', run_id)) FROM %s.outbox), '[]'))"
                % (SCHEMA, SCHEMA, SCHEMA))

    def snapshot(self, timeout=4):
        env = dict(os.environ, PGHOST=self.pg_dir, PGPORT=str(self.port), PGUSER="postgres",
                   PGDATABASE="postgres", PGCONNECT_TIMEOUT="3")
        try:
            done = subprocess.run(["psql", "-X", "-At", "-c", self.SNAPSHOT], env=env,
                                  capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return None
        if done.returncode != 0 or not done.stdout.strip():
            return None
        return json.loads(done.stdout)

    def observe(self, stop):
        known, outbox_seen, spool_seen = {}, set(), {}
        while not stop.is_set():
            snap = self.snapshot()
            if snap is None:
                self.history.log("tick", ok=False)
            else:
                changes = []
                for row in snap["runs"]:
                    key = (row["hb"], row["ceiling"], row["status"], row["spend"],
                           row["reconciled"])
                    if known.get(row["id"]) != key:
                        known[row["id"]] = key
                        changes.append(row)
                fresh = [e for e in snap["outbox"] if e["event_id"] not in outbox_seen]
                outbox_seen.update(e["event_id"] for e in fresh)
                self.history.log("tick", ok=True, now=snap["now"], runs=changes, outbox=fresh,
                                 outbox_size=len(snap["outbox"]))
            for n in range(self.args.hosts):
                spool = os.path.join(self.host_dir(n), "state", "spendcap", "spool")
                try:
                    names = set(os.listdir(spool))
                except OSError:
                    names = set()
                for name in names - set(spool_seen.get(n, ())):
                    row = None
                    try:
                        with open(os.path.join(spool, name)) as f:
                            row = json.load(f).get("final")
                    except (OSError, ValueError):
                        pass
                    self.history.log("spooled", host=n, file=name, final=row)
                for name in set(spool_seen.get(n, ())) - names:
                    self.history.log("spool_gone", host=n, file=name)
                spool_seen[n] = names
            stop.wait(self.args.tick)

    # ---- faults ----

    def postmaster_pid(self):
        try:
            with open(os.path.join(self.pg_dir, "data", "postmaster.pid")) as f:
                pid = int(f.readline())
            return pid if alive(pid) else None
        except (OSError, ValueError):
            return None

    def ensure_server(self):
        """Starts the server again when a fault left it down (a PANIC on a full WAL disk ends
        in a postmaster that exits when its recovery cannot write WAL)."""
        if self.postmaster_pid() is None:
            run_quiet([SERVER_SCRIPT, "start"], env=self.server_env, timeout=180)

    def fault(self, kind, **params):
        start = self.history.log("fault_start", fault=kind, **params)
        detail = getattr(self, "fault_" + kind)(**params) or {}
        self.history.log("fault_end", fault=kind, started=start["t"], **dict(params, **detail))

    def fault_pg_restart(self):
        done = run_quiet(["runuser", "-u", "postgres", "--", "setsid",
                          os.path.join(PG_BIN, "pg_ctl"), "-D", os.path.join(self.pg_dir, "data"),
                          "-l", os.path.join(self.pg_dir, "server.log"), "-w", "-t", "60",
                          "restart", "-m", "immediate"], timeout=120)
        self.ensure_server()
        return {"rc": done.returncode}

    def fault_pg_stop(self, seconds):
        master = self.postmaster_pid()
        if master is None:
            return {"skipped": "no server"}
        group = [master] + children_of(master)
        try:
            for pid in group:
                try:
                    os.kill(pid, signal.SIGSTOP)
                except ProcessLookupError:  # a backend that ended meanwhile
                    pass
            time.sleep(seconds)
        finally:
            # Always: a server left stopped would turn the rest of the run into one outage.
            for pid in group:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
        return {"processes": len(group)}

    def fault_cut(self, host, seconds, how):
        outside, inside = self.tag + "h%d" % host, self.tag + "p%d" % host
        bogus = "02:00:00:00:0f:%02x" % host
        try:
            if how == "link":
                self.ip("link", "set", outside, "down")
            else:
                self.ip("neigh", "replace", NET % (host, 2), "lladdr", bogus, "dev", outside,
                        "nud", "permanent")
                self.ip("-n", self.ns(host), "neigh", "replace", NET % (host, 1), "lladdr",
                        bogus, "dev", inside, "nud", "permanent")
            time.sleep(seconds)
        finally:  # the host comes back whatever happened
            if how == "link":
                self.ip("link", "set", outside, "up", check=False)
            else:
                self.ip("neigh", "del", NET % (host, 2), "dev", outside, check=False)
                self.ip("-n", self.ns(host), "neigh", "del", NET % (host, 1), "dev", inside,
                        check=False)
        return {}

    def fault_wal_full(self, seconds):
        filler = os.path.join(self.wal_disk, "filler")
        written, switched = 0, None
        try:
            with open(filler, "wb") as f:
                chunk = b"\0" * (1 << 20)
                try:
                    while True:
                        f.write(chunk)
                        f.flush()
                        written += len(chunk)
                except OSError:
                    pass
            env = dict(os.environ, PGHOST=self.pg_dir, PGPORT=str(self.port), PGUSER="postgres",
                       PGDATABASE="postgres", PGCONNECT_TIMEOUT="3")
            # A new WAL segment needs room the disk no longer has (wal_recycle is off). The
            # switch itself may hang on the full disk: bounded, and the disk is freed anyway.
            try:
                switched = run_quiet(["psql", "-X", "-At", "-c", "SELECT pg_switch_wal()"],
                                     env=env, timeout=seconds).returncode
            except subprocess.TimeoutExpired:
                switched = "timed out"
            time.sleep(max(0, seconds - 1))
            down = self.postmaster_pid() is None
        finally:
            try:
                os.unlink(filler)
            except OSError:
                pass
        self.ensure_server()
        return {"filled_mb": written >> 20, "switch": switched, "server_went_down": down}

    def fault_kill_wrappers(self, count):
        with self.lock:
            victims = self.fault_rng.sample(sorted(self.running),
                                            min(count, len(self.running)))
            chosen = [(label, self.running[label][1]) for label in victims]
        for label, process in chosen:
            try:
                process.send_signal(signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.history.log("sigkill_wrapper", label=label, pid=process.pid)
        return {"labels": victims}

    def fault_node_crash(self, host, down_seconds):
        self.host_paused[host] = time.time() + down_seconds
        done = run_quiet(["ip", "netns", "pids", self.ns(host)])
        pids = [int(p) for p in done.stdout.split()]
        with self.lock:
            labels = sorted(l for l, (n, _) in self.running.items() if n == host)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return {"processes": len(pids), "labels": labels}

    def fault_webhook_down(self, seconds):
        self.receiver.down()
        try:
            time.sleep(seconds)
        finally:
            self.receiver.up()
        return {}

    def schedule(self):
        """Every kind once, in this order, one after another with a few seconds between (so
        that the recovery after each can be seen), then (--random-faults) more of the kinds at
        random places in the sequence, all from the seed. The receiver's outage runs beside."""
        hosts, c = self.args.hosts, self.ceiling_seconds
        rng = self.fault_rng
        long_cut = c + self.shutdown_seconds + 4
        plan = [
            ("kill_wrappers", {"count": max(2, hosts)}),
            ("cut", {"host": rng.randrange(hosts), "seconds": max(2, c // 3), "how": "link"}),
            ("pg_restart", {}),
            ("cut", {"host": rng.randrange(hosts), "seconds": long_cut, "how": "drop"}),
            ("pg_stop", {"seconds": long_cut}),
            ("wal_full", {"seconds": 6}),
            ("node_crash", {"host": rng.randrange(hosts), "down_seconds": 4}),
        ]
        kinds = ["kill_wrappers", "cut", "pg_restart", "pg_stop", "node_crash", "wal_full"]
        for _ in range(self.args.random_faults):
            kind = rng.choice(kinds)
            params = {"kill_wrappers": {"count": rng.randint(1, 2 * hosts)},
                      "cut": {"host": rng.randrange(hosts),
                              "seconds": rng.choice([max(2, c // 3), long_cut]),
                              "how": rng.choice(["link", "drop"])},
                      "pg_restart": {},
                      "pg_stop": {"seconds": rng.choice([3, long_cut])},
                      "wal_full": {"seconds": 6},
                      "node_crash": {"host": rng.randrange(hosts), "down_seconds": 4}}[kind]
            plan.insert(rng.randint(1, len(plan)), (kind, params))
        return plan

    def faults(self, began):
        hook = threading.Thread(target=lambda: (
            time.sleep(max(0, began + 0.05 * self.args.duration - time.time())),
            self.fault("webhook_down", seconds=0.45 * self.args.duration)), daemon=True)
        hook.start()
        time.sleep(max(0, began + 0.05 * self.args.duration - time.time()))
        for kind, params in self.schedule():
            try:
                self.fault(kind, **params)
            except Exception as error:  # a fault that could not be made is said, not hidden
                self.history.log("fault_error", fault=kind, error=str(error))
            time.sleep(self.args.fault_gap)
        hook.join()
        self.faults_done = True

    # ---- the end ----

    def on_each_host(self, argv, timeout=120):
        results = []
        for n in range(self.args.hosts):
            results.append(run_quiet(self.on_host(n, [self.spendcap] + argv + [
                "--ledger", self.url]), timeout=timeout, env=self.base_env(n),
                cwd=self.host_dir(n)))
        return results

    def settle(self):
        """After the runs: reconcile lost runs, replay spools, flush the outbox, each on every
        host (what the next command there would do), until nothing is left or the bound."""
        bound = time.time() + self.ceiling_seconds + self.shutdown_seconds + 120
        while True:
            self.ensure_server()
            ps = self.on_each_host(["ps"])
            flush = self.on_each_host(["outbox", "flush"])
            snap = self.snapshot()
            spools = [os.listdir(d) for d in (os.path.join(self.host_dir(n), "state",
                                                           "spendcap", "spool")
                                              for n in range(self.args.hosts))
                      if os.path.isdir(d)]
            pending = snap is None or any(r["status"] == "running" for r in snap["runs"]) or \
                bool(snap["outbox"]) or any(any(n.endswith(".json") for n in s) for s in spools)
            self.history.log("settle", pending=pending,
                             ps_rc=[p.returncode for p in ps],
                             flush_rc=[f.returncode for f in flush],
                             flush_err=[f.stderr[-300:] for f in flush if f.returncode])
            if not pending or time.time() > bound:
                return
            time.sleep(2)

    def run(self):
        self.setup_network()
        self.setup_server()
        self.receiver.up()
        self.cleanups.append(self.receiver.down)
        print("fleet: seed %d, %d hosts x %d slots, %d s, out %s" % (
            self.args.seed, self.args.hosts, self.args.slots, self.args.duration, self.out),
            flush=True)
        stop = threading.Event()
        observer = threading.Thread(target=self.observe, args=(stop,), daemon=True)
        observer.start()
        began = time.time()
        self.deadline = began + self.args.duration
        self.history.log("begin", deadline=self.deadline)
        slots = [threading.Thread(target=self.slot, args=(n, s), daemon=True)
                 for n in range(self.args.hosts) for s in range(self.args.slots)]
        for i, t in enumerate(slots):
            t.start()
            time.sleep(min(0.05, 2.0 / len(slots)))  # not every wrapper in the same instant
        self.faults(began)
        for t in slots:
            t.join()
        self.history.log("runs_done")
        self.settle()
        for n in range(self.args.hosts):
            spool = os.path.join(self.host_dir(n), "state", "spendcap", "spool")
            self.history.log("spool_final", host=n,
                             files=sorted(os.listdir(spool)) if os.path.isdir(spool) else [])
        # Nothing of any tree may be left: the marker is in every process the fleet started.
        left = [p for p in marked_processes(self.marker)]
        self.history.log("survivors", pids=left,
                         commands=[open("/proc/%d/cmdline" % p, "rb").read()
                                   .replace(b"\0", b" ").decode(errors="replace")[:200]
                                   for p in left if os.path.exists("/proc/%d" % p)])
        stop.set()
        observer.join()
        final = self.snapshot(timeout=30)
        self.history.log("final", ledger=final)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def cleanup(self):
        for step in reversed(self.cleanups):
            try:
                step()
            except Exception as error:
                print("fleet: cleanup: %s" % error, file=sys.stderr)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--slots", type=int, default=10, help="concurrent runs per host")
    parser.add_argument("--duration", type=int, default=75, help="seconds that runs start")
    parser.add_argument("--seed", type=int, default=None,
                        help="default: $SPENDCAP_FLEET_SEED, else 33")
    parser.add_argument("--random-faults", type=int, default=0)
    parser.add_argument("--sync", type=int, default=1)
    parser.add_argument("--horizon", type=int, default=6, help="claim horizon, seconds")
    parser.add_argument("--fault-gap", type=float, default=4,
                        help="seconds between two faults (the recovery is measured in them)")
    parser.add_argument("--tick", type=float, default=1.0)
    parser.add_argument("--wal-mb", type=int, default=96)
    parser.add_argument("--pg-port", type=int, default=0, help="default: a free port")
    parser.add_argument("--hook-port", type=int, default=0)
    parser.add_argument("--out", default="/tmp/spendcap-fleet")
    parser.add_argument("--spendcap", default=os.environ.get("SPENDCAP_BIN") or
                        os.path.join(REPO, "build", "spendcap"))
    args = parser.parse_args(argv)
    why = why_not_here()
    if why:
        print("SPENDCAP_SKIPPED: fleet: %s" % why)
        return SKIP
    if args.seed is None:
        args.seed = int(os.environ.get("SPENDCAP_FLEET_SEED") or 33)
    for name in ("hook_port", "pg_port"):
        if not getattr(args, name):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                setattr(args, name, s.getsockname()[1])
    fleet = Fleet(args)
    # SIGTERM (a CTest timeout, a Ctrl-C'd script) ends in the cleanup below, as an error does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        fleet.run()
    finally:
        fleet.cleanup()
        fleet.history.close()
    report = checker.check_file(os.path.join(fleet.out, "history.jsonl"))
    with open(os.path.join(fleet.out, "report.json"), "w") as f:
        json.dump(report, f, indent=2)
    print(checker.format_report(report))
    print("fleet: seed %d (rerun: --seed %d); history %s" % (
        args.seed, args.seed, os.path.join(fleet.out, "history.jsonl")))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
