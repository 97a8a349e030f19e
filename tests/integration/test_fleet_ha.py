"""Two hosts, one ledger (issue 38, item 3): two shared runners, each a network namespace with its
own /etc (mount namespace, overlaid) and host name, installed with scripts/install-shared-runner.sh
over one PostgreSQL server of the test's own (scram-sha-256 over TCP, reached over each host's
veth pair), with real users:

- through pgbouncer in transaction mode: a team budget holds across the hosts (the sum of spend
  <= the budget), a member's `spendcap stop` on host A stops host B's run within one sync, the
  webhooks of both hosts are signed with the runners' secret, each host writes its metrics;
- the server restarted mid-run (`pg_ctl restart -m fast`): the runs go on and each is recorded
  once, its spend counted once;
- a failover: the ledger a libpq multi-host URL (primary, then a streaming-replication standby
  made by pg_basebackup -R, target_session_attrs=read-write), the primary stopped (immediate) and
  the standby promoted mid-run: the runs go on, none lost or counted twice; the time from the
  promotion to the first heartbeat on the new primary is printed (docs/guide/postgresql.md).

Negative control: with the install script before this change, the multi-host URL fails the
install (`Port could not be cast to integer value`), so the failover case fails at its setup.

Needs root, ip(8), unshare, nsenter, PostgreSQL's server binaries and pg_basebackup, and for the
first case pgbouncer; skipped, saying why, without."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

from spendcap_testlib import SPENDCAP, add_home_users, free_port, wait_until
from test_guide_install import (BOUNCER, MISSING, PG_BIN, Cluster, guide_blocks, substitute)
from test_metrics import parse_exposition
from test_postgres_netns import netns_unavailable
from test_shared_runner import INSTALL
from test_webhook_standards import headers_of, key_of, spec_verify
from test_webhooks import Endpoint

WHY = MISSING or netns_unavailable() or (
    None if os.path.exists(os.path.join(PG_BIN, "pg_basebackup")) else "no pg_basebackup")

NET = "10.238.%d.%d"
DB = NET % (0, 1)  # the server's address: host 0's pair, routed to from host 1
SECRET = "whsec_" + "aGEtc2VjcmV0LW9mLXRoZS1ydW5uZXJzLTAxMjM0NQ=="
URL_FILE, SECRET_FILE = "/etc/spendcap/hook.url", "/etc/spendcap/hook.secret"
RATE_USD_PER_HOUR = 36.0  # one cent a second
TEAM_BUDGET_USD = 0.3
LOCKED = {
    "locked": True,
    "ledger": "set by the install",
    "rates": {"gpu": {"a100-80gb": {"on_demand": RATE_USD_PER_HOUR}}},
    # Short syncs and claims keep the runs short: each grant covers 2 s of burn, and a sync (1 s)
    # is how long a stop order takes to arrive.
    "defaults": {"gpu": "a100-80gb", "gpus": 1, "grace": "0s", "kill_after": "1s", "sync": "1s",
                 "claim_horizon": "2s"},
    "budgets": {"team": {"vision": {"amount": TEAM_BUDGET_USD, "period": "month"},
                         "nlp": {"amount": 50, "period": "month"}}},
    "webhooks": [{"url_file": URL_FILE, "secret_file": SECRET_FILE,
                  "events": ["finished", "killed"]}],
}
SYNC_SECONDS = 1.0


class Server(Cluster):
    """Cluster (test_guide_install) listening on DB too, scram for the hosts' addresses; or, with
    `primary`, its streaming-replication standby (pg_basebackup -R) on a port of its own."""

    def __init__(self, top, name="pg", primary=None):
        self.dir = os.path.join(top, name)
        os.mkdir(self.dir)
        shutil.chown(self.dir, "postgres")
        self.port = free_port()
        self.data = self.dir + "/data"
        self.as_server = ["runuser", "-u", "postgres", "--"]
        if primary:
            subprocess.run(self.as_server + [
                os.path.join(PG_BIN, "pg_basebackup"), "-h", primary.dir, "-p",
                str(primary.port), "-D", self.data, "-R", "-X", "stream", "--no-sync"],
                check=True, capture_output=True, timeout=120)
        else:
            subprocess.run(self.as_server + [
                os.path.join(PG_BIN, "initdb"), "-D", self.data, "-U", "postgres",
                "--auth-local=peer", "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync"],
                check=True, capture_output=True, timeout=120)
            with open(self.data + "/pg_hba.conf", "a") as f:
                f.write("host all all 10.238.0.0/16 scram-sha-256\n")
        self.start()

    def ctl(self, *args, timeout=120):
        return subprocess.run(self.as_server + [os.path.join(PG_BIN, "pg_ctl"), "-D", self.data,
                                                "-w", "-t", "60"] + list(args),
                              capture_output=True, text=True, timeout=timeout)

    def start(self):
        done = subprocess.run(self.as_server + [
            "setsid", os.path.join(PG_BIN, "pg_ctl"), "-D", self.data, "-l",
            self.dir + "/server.log", "-w", "-t", "60", "start", "-o",
            "-k %s -p %d -c listen_addresses=127.0.0.1,%s -c fsync=off "
            "-c password_encryption=scram-sha-256" % (self.dir, self.port, DB)],
            capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise AssertionError("pg_ctl start: %s%s" % (done.stdout, done.stderr))

    def stop(self):
        self.ctl("-m", "immediate", "stop")

    def rows(self, sql="SELECT row_to_json(r) FROM runs r"):
        return [json.loads(line) for line in self.psql(sql, database="spendcap").splitlines()
                if line]


class Host:
    """One runner host: a network namespace (its veth pair to the machine, a default route), a
    mount namespace with /etc overlaid and a UTS namespace with its own name, held by one process
    and entered with nsenter; its install's files in its own directory."""

    def __init__(self, case, top, index):
        self.index = index
        tag = "%x%d" % (os.getpid() & 0xfffff, index)
        self.ns, outside, inside = "f38-" + tag, "f38o" + tag, "f38i" + tag
        self.name = "f38host%d" % index
        for args in (["netns", "add", self.ns],
                     ["link", "add", outside, "type", "veth", "peer", "name", inside],
                     ["link", "set", inside, "netns", self.ns],
                     ["addr", "add", NET % (index, 1) + "/30", "dev", outside],
                     ["link", "set", outside, "up"],
                     ["-n", self.ns, "addr", "add", NET % (index, 2) + "/30", "dev", inside],
                     ["-n", self.ns, "link", "set", inside, "up"],
                     ["-n", self.ns, "link", "set", "lo", "up"],
                     ["-n", self.ns, "route", "add", "default", "via", NET % (index, 1)]):
            if args[0] == "netns":
                case.addCleanup(subprocess.run, ["ip", "netns", "del", self.ns],
                                capture_output=True)
                case.addCleanup(subprocess.run, ["ip", "link", "del", outside],
                                capture_output=True)
            done = subprocess.run(["ip"] + args, capture_output=True, text=True, timeout=30)
            case.assertEqual(done.returncode, 0, "ip %s: %s" % (" ".join(args), done.stderr))
        self.dir = os.path.join(top, "host%d" % index)
        os.mkdir(self.dir, 0o755)
        upper, work, ready = (os.path.join(self.dir, n) for n in ("etc-upper", "etc-work",
                                                                   "ready"))
        os.mkdir(upper)
        os.mkdir(work)
        script = ('hostname "$3" && mount -t overlay overlay -o lowerdir=/etc,upperdir="$0",'
                  'workdir="$1" /etc && touch "$2" && exec sleep 3600')
        # nsenter, not `ip netns exec`: that remounts /sys, and the runner needs the cgroup
        # hierarchy mounted under it.
        self.holder = subprocess.Popen(["nsenter", "--net=/run/netns/" + self.ns, "unshare",
                                        "--mount",
                                        "--uts", "--propagation", "private", "sh", "-c", script,
                                        upper, work, ready, self.name])
        case.addCleanup(self.holder.wait)
        case.addCleanup(self.holder.kill)
        wait_until(lambda: os.path.exists(ready) or self.holder.poll() is not None, 10,
                   what="host %d's namespaces" % index)
        case.assertIsNone(self.holder.poll(), "host %d's /etc overlay failed" % index)
        self.bin = os.path.join(self.dir, "bin", "spendcap")
        self.mdir = os.path.join(self.dir, "textfiles")
        self.service = "f38svc%s" % uuid.uuid4().hex[:8]

    def command(self, argv, user=None):
        command = ["nsenter", "-t", str(self.holder.pid), "-m", "-u", "-n", "--"]
        if user:
            command += ["setpriv", "--reuid", user, "--regid", user, "--init-groups"]
        return command + list(argv)

    def inside(self, argv, user=None, env=None, input=None, timeout=90):
        return subprocess.run(self.command(argv, user), env=env, capture_output=True, text=True,
                              timeout=timeout, input=input, cwd="/")

    def install(self, case, url):
        """install-shared-runner.sh with the PostgreSQL ledger URL (as the shared-runner guide
        says), its own service user and metrics directory; the login role's SQL it prints, run
        by the administrator; the runner's webhook URL and secret files (root:spendcap 0640)."""
        policy = os.path.join(self.dir, "runner.json")
        with open(policy, "w") as f:
            json.dump(LOCKED, f)
        result = self.inside(["sh", INSTALL, "--binary", os.path.abspath(SPENDCAP), "--bin",
                              self.bin, "--runner", os.path.join(self.dir, "lib",
                                                                 "spendcap-runner"),
                              "--man-dir", os.path.join(self.dir, "man"), "--user", self.service,
                              "--ledger", url, "--password-file",
                              os.path.join(self.dir, "pw", "ledger.password"),
                              "--metrics-dir", self.mdir, policy], env=case.root_env())
        case.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        printed = result.stdout.split("administrator creates the service user's login role "
                                      "(psql):\n", 1)
        case.assertEqual(len(printed), 2, result.stdout)
        case.server.psql("\n".join(line.strip() for line in printed[1].splitlines()
                                   if line.startswith("  ")))
        for path, text in ((URL_FILE, case.endpoint.url), (SECRET_FILE, SECRET)):
            done = self.inside(["sh", "-c", 'umask 077; printf "%s\\n" "$1" > "$0" && '
                                'chown root:spendcap "$0" && chmod 0640 "$0"', path, text])
            case.assertEqual(done.returncode, 0, done.stderr)


@unittest.skipIf(WHY, WHY or "")
class TwoHostsOneLedgerTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="spendcap-ha-")
        os.chmod(self.tmp, 0o755)
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.hosts = [Host(self, self.tmp, n) for n in range(2)]
        self.server = Server(self.tmp)
        self.addCleanup(self.server.stop)
        self.passwords = {name: "pw-" + uuid.uuid4().hex for name in
                          ("OWNER-PASSWORD", "ALICE-PASSWORD", "BOB-PASSWORD", "AUTH-PASSWORD")}
        self.blocks = guide_blocks()
        self.users = add_home_users(self, self.tmp, "f38u", 2)
        self.root_home = os.path.join(self.tmp, "root-home")
        os.mkdir(self.root_home, 0o700)
        self.endpoint = Endpoint([200], host=DB)
        self.addCleanup(self.endpoint.close)

    def root_env(self):
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.root_home,
                "USER": "root"}

    def user_env(self, user):
        return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.path.join(self.tmp, user),
                "USER": user, "LOGNAME": user}

    def values(self, hostports):
        values = dict(self.passwords)
        values.update({"alice": self.users[0], "bob": self.users[1]})
        values["db.internal:5432"] = hostports[0]
        return values

    def set_up_ledger(self, hostports):
        """After the guide's administrator SQL: its users' roles, and root's and the users'
        ~/.pgpass lines for every host:port of the ledger's URL."""
        values = self.values(hostports)
        self.server.psql(substitute(self.blocks["users"], values))
        lines = {self.root_home: "%s:spendcap:spendcap_owner:" + self.passwords["OWNER-PASSWORD"]}
        for user, word in zip(self.users, ("ALICE", "BOB")):
            lines[os.path.join(self.tmp, user)] = "%s:spendcap:" + user + ":" + \
                self.passwords[word + "-PASSWORD"]
        for home, line in lines.items():
            with open(os.path.join(home, ".pgpass"), "a") as f:
                f.write("".join(line % hostport + "\n" for hostport in hostports))
            os.chmod(os.path.join(home, ".pgpass"), 0o600)
            shutil.chown(os.path.join(home, ".pgpass"), os.stat(home).st_uid,
                         os.stat(home).st_gid)

    def start_pgbouncer(self):
        """The guide's pgbouncer.ini and auth SQL, listening on DB; returns its port."""
        port = free_port()
        ini = substitute(self.blocks["pgbouncer-ini"], self.values(["%s:%d" % (DB, port)]))
        ini = ini.replace("port=5432", "port=%d" % self.server.port)
        ini = ini.replace("listen_addr = 127.0.0.1", "listen_addr = " + DB)
        ini = ini.replace("listen_port = 6432", "listen_port = %d" % port)
        bouncer = os.path.join(self.tmp, "pgbouncer")
        os.mkdir(bouncer)
        userlist = os.path.join(bouncer, "userlist.txt")
        ini = ini.replace("/etc/pgbouncer/userlist.txt", userlist)
        ini += "logfile = %s/log\npidfile = %s/pid\nunix_socket_dir =\n" % (bouncer, bouncer)
        with open(os.path.join(bouncer, "pgbouncer.ini"), "w") as f:
            f.write(ini)
        with open(userlist, "w") as f:
            f.write('"pgbouncer_auth" "%s"\n' % self.passwords["AUTH-PASSWORD"])
        os.chmod(userlist, 0o600)
        subprocess.run(["chown", "-R", "postgres", bouncer], check=True)
        self.server.psql(substitute(self.blocks["pgbouncer-sql"], self.values([DB])),
                         database="spendcap")
        subprocess.run(self.server.as_server + [BOUNCER, "-d", "-q",
                                                os.path.join(bouncer, "pgbouncer.ini")],
                       check=True, capture_output=True, timeout=30)
        pidfile = os.path.join(bouncer, "pid")
        wait_until(lambda: os.path.exists(pidfile), 10, what="pgbouncer's pid file")
        self.addCleanup(lambda: subprocess.run(["kill", open(pidfile).read().strip()],
                                               capture_output=True))
        return port

    def start_run(self, host, user, team, seconds, *extra):
        status = os.path.join(self.tmp, user, "status-%s.json" % uuid.uuid4().hex[:8])
        argv = [host.bin, "run", "--team", team, "--status-file", status] + list(extra) + \
            ["--", "python3", "-c", "import time; time.sleep(%s)" % seconds]
        process = subprocess.Popen(host.command(argv, user), env=self.user_env(user),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                   cwd="/")
        self.addCleanup(lambda: process.poll() is None and process.kill())
        process.status_file = status
        return process

    def running_ids(self, server, count):
        """The ids of COUNT running runs, once the ledger holds them (polled)."""
        ids = []

        def found():
            ids[:] = [r["id"] for r in server.rows() if r["status"] == "running"]
            return len(ids) >= count
        wait_until(found, 60, interval=0.1, what="%d running runs in the ledger" % count)
        return ids

    def finish(self, process, timeout=120):
        _, err = process.communicate(timeout=timeout)
        return process.returncode, err

    def check_once_each(self, server, processes):
        """Every run one final row of its own, its spend what its status file says, and the
        team's usage the sum of its runs' spend: nothing lost, nothing counted twice."""
        rows = server.rows()
        self.assertEqual(len(rows), len({r["id"] for r in rows}))
        by_id = {r["id"]: r for r in rows}
        for process in processes:
            with open(process.status_file) as f:
                status = json.load(f)
            row = by_id[status["run_id"]]
            self.assertNotEqual(row["status"], "running", row)
            self.assertAlmostEqual(row["spend_micros"] / 1e6, status["spend"], places=4)
        return rows

    # ---- the cases ----

    @unittest.skipUnless(os.path.exists(BOUNCER), "no pgbouncer at " + BOUNCER)
    def test_two_hosts_share_a_team_budget_a_stop_order_and_a_server_restart(self):
        self.server.psql(substitute(self.blocks["admin"], self.values(["x"])))
        port = self.start_pgbouncer()
        self.set_up_ledger(["%s:%d" % (DB, port)])
        url = "postgresql://spendcap_owner@%s:%d/spendcap" % (DB, port)
        for host in self.hosts:
            host.install(self, url)
        alice, bob = self.users
        # Host 1 reaches the server only through host 0's address, over its own pair.
        route = self.hosts[1].inside(["ip", "route", "get", DB]).stdout
        self.assertIn("via " + NET % (1, 1), route)

        # 1. One team budget across both hosts: four runs, two a host, that would spend 0.6.
        runs = [self.start_run(host, user, "vision", 15) for host in self.hosts
                for user in self.users]
        results = [self.finish(p) for p in runs]
        codes = [code for code, _ in results]
        self.assertTrue(set(codes) <= {120, 124}, results)
        self.assertIn(124, codes, "some ran until the team budget stopped them")
        rows = self.check_once_each(self.server, [p for p, (c, _) in zip(runs, results)
                                                  if c == 124])
        vision = [r for r in rows if r["team"] == "vision"]
        total = sum(r["spend_micros"] for r in vision) / 1e6
        self.assertLessEqual(total, TEAM_BUDGET_USD, "the team budget held across hosts")
        self.assertEqual({r["host"] for r in vision if r["spend_micros"] > 0},
                         {h.name for h in self.hosts}, "both hosts spent from it")
        print("\n  team budget %.2f across 2 hosts: spent %.4f by %d runs (exit codes %s)" %
              (TEAM_BUDGET_USD, total, len(vision), sorted(codes)), file=sys.stderr)

        # 2. A member's stop order on host 0 stops the run on host 1 within one sync.
        far = self.start_run(self.hosts[1], alice, "nlp", 60)
        (run_id,) = self.running_ids(self.server, 1)
        stop = self.hosts[0].inside([self.hosts[0].bin, "stop", "--run", run_id[:8], "--reason",
                                     "cross-host"], user=alice, env=self.user_env(alice))
        self.assertEqual(stop.returncode, 0, stop.stderr)
        ordered = time.monotonic()
        code, err = self.finish(far, timeout=30)
        took = time.monotonic() - ordered
        self.assertEqual(code, 123, err)
        # One sync for the order to arrive, and the kill path (no grace: nothing catches the
        # checkpoint signal) and the final row on a loaded machine.
        self.assertLess(took, SYNC_SECONDS + 3.0)
        print("  stop order on host 0 -> host 1's run ended in %.2f s (sync %.0f s)" %
              (took, SYNC_SECONDS), file=sys.stderr)

        # 3. Webhooks from both hosts, signed with the runners' secret (a wrong key fails).
        def delivered():
            return {e.get("host") for e in self.endpoint.events()} >= {h.name for h in
                                                                      self.hosts}
        wait_until(delivered, 30, interval=0.1, what="webhooks from both hosts")
        for request in self.endpoint.requests:
            self.assertTrue(spec_verify(key_of(SECRET), headers_of(request), request["body"]))
            self.assertFalse(spec_verify(b"not the key", headers_of(request), request["body"]))
        # 4. Metrics on both: the team's file, with the ledger's budget.
        for host in self.hosts:
            with open(os.path.join(host.mdir, "spendcap_team_vision.prom")) as f:
                samples = parse_exposition(f.read())
            self.assertEqual(samples["spendcap_team_budget_usd"][0][1], TEAM_BUDGET_USD)
            self.assertGreater(samples["spendcap_team_spend_usd_total"][0][1], 0)

        # 5. The server restarted under two running runs (one a host): they go on and end by
        # themselves, each recorded once; their heartbeats resumed after the restart.
        before = {r["id"] for r in self.server.rows()}
        runs = [self.start_run(host, bob, "nlp", 6) for host in self.hosts]
        ids = [i for i in self.running_ids(self.server, 2) if i not in before]
        self.assertEqual(len(ids), 2)
        # pg_ctl restart -m fast, as two steps: start() detaches the postmaster from our pipes.
        stopped = self.server.ctl("-m", "fast", "stop")
        self.assertEqual(stopped.returncode, 0, stopped.stderr)
        self.server.start()
        up_at = float(self.server.psql("SELECT extract(epoch FROM pg_postmaster_start_time())"))
        for process in runs:
            code, err = self.finish(process)
            self.assertEqual(code, 0, err)
        rows = {r["id"]: r for r in self.check_once_each(self.server, runs)}
        for run_id in ids:
            self.assertEqual(rows[run_id]["status"], "succeeded")
            self.assertGreater(rows[run_id]["heartbeat_at"], up_at)
        usage = [b for b in json.loads(self.hosts[0].inside(
            [self.hosts[0].bin, "budgets", "--json"], user=bob, env=self.user_env(bob)).stdout)
            if b["scope"] == "team:nlp"][0]
        nlp = sum(r["spend_micros"] for r in rows.values() if r["team"] == "nlp") / 1e6
        self.assertAlmostEqual(usage["spent"], nlp, places=4)

    def test_failover_to_a_promoted_standby_loses_no_run(self):
        values = self.values(["x"])
        self.server.psql(substitute(self.blocks["admin"], values))
        standby = Server(self.tmp, "standby", primary=self.server)
        self.addCleanup(standby.stop)
        # Synchronous: a commit the primary acknowledged is on the standby, so the promotion
        # loses no grant, heartbeat or final row.
        self.server.psql("ALTER SYSTEM SET synchronous_standby_names = '*'; SELECT "
                         "pg_reload_conf();")
        hostports = ["%s:%d" % (DB, self.server.port), "%s:%d" % (DB, standby.port)]
        self.set_up_ledger(hostports)
        url = "postgresql://spendcap_owner@%s/spendcap?target_session_attrs=read-write" % \
            ",".join(hostports)
        for host in self.hosts:
            host.install(self, url)
        policy = json.loads(self.hosts[0].inside(["cat", "/etc/spendcap/policy.json"]).stdout)
        self.assertEqual(policy["ledger"], url.replace("spendcap_owner@", ""))
        alice, bob = self.users
        runs = [self.start_run(host, user, "nlp", 8) for host, user in zip(self.hosts,
                                                                         self.users)]
        ids = self.running_ids(self.server, 2)
        # The standby has them (replicated); the last heartbeat it saw before the promotion.
        wait_until(lambda: len([r for r in standby.rows() if r["id"] in ids]) == 2, 30,
                   interval=0.1, what="the runs on the standby")
        self.server.stop()
        promoted_at = time.monotonic()
        seen = max(r["heartbeat_at"] for r in standby.rows() if r["id"] in ids)
        done = standby.ctl("promote")
        self.assertEqual(done.returncode, 0, done.stderr)
        writable_at = time.monotonic()  # pg_ctl promote -w: the standby takes writes now

        def beating():
            rows = [r for r in standby.rows() if r["id"] in ids]
            return len([r for r in rows if r["heartbeat_at"] > seen]) == 2
        wait_until(beating, 30, interval=0.05, what="heartbeats on the promoted standby")
        beat_at = time.monotonic()
        results = [self.finish(p) for p in runs]
        for code, err in results:
            self.assertEqual(code, 0, err)
        rows = {r["id"]: r for r in self.check_once_each(standby, runs)}
        lost = [i for i in ids if rows.get(i, {}).get("status") != "succeeded"]
        self.assertEqual(lost, [])
        usage = [b for b in json.loads(self.hosts[1].inside(
            [self.hosts[1].bin, "budgets", "--json"], user=bob, env=self.user_env(bob)).stdout)
            if b["scope"] == "team:nlp"][0]
        self.assertAlmostEqual(usage["spent"], sum(r["spend_micros"] for r in rows.values())
                               / 1e6, places=4)
        print("\n  failover: both runs' heartbeats on the new primary %.2f s after the primary "
              "stopped, %.2f s after the promotion completed; runs lost: %d of %d" %
              (beat_at - promoted_at, beat_at - writable_at, len(lost), len(ids)),
              file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
