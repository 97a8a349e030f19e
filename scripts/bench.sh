#!/usr/bin/env bash
# Runs the benchmarks and prints the tables README.md quotes (issue 14): exec overhead against
# bare exec, `timeout` and the floor of a run's guarantees (tests/bench/floor.c, as root) (SQLite, a webhook, PostgreSQL, and the variants of the breakdown), kill
# latency against the kernel's floor, spend overshoot and use, supervision cost at intervals 1 s and
# 100 ms, ledger throughput (SQLite and PostgreSQL), `budgets` and `report` over 1,000,000 runs.
# Builds first (scripts/setup.sh; SPENDCAP_BENCH_NO_SETUP=1 skips it and builds only the benchmarks).
# The kill benchmark needs root and a writable cgroup v2 hierarchy; PostgreSQL parts need the
# postgresql server package (a throwaway server on SPENDCAP_PG_PORT, stopped afterwards).
# Usage: scripts/bench.sh [--quick | --pg | --table | --idle] [--markdown FILE]
#   --quick: 30 overhead rounds, 10 s supervision windows, 1 kill round of 10 and 100 processes,
#            5 overshoot runs, 1 s ledger windows and 100,000 runs for the views (a few minutes).
#   --pg:    the PostgreSQL parts only, on the durable server (issue 23): a run's time against
#            SQLite's (20 rounds), heartbeats, pg_test_fsync, multi-node stops (a few minutes).
#   --table: only the figures of the performance table (issue 32), each beside its goal: a run
#            against `timeout` and the floor (wall and CPU, 30 rounds), `--version` and `ps`, a run on the
#            durable PostgreSQL directly and through pgbouncer against SQLite, heartbeats at 32
#            writers, and the reports over 1,000,000 runs ($SPENDCAP_BENCH_REPORT_DIR: a ledger
#            seeded by an earlier report_bench --dir, reused).
#   --idle:  what supervising an idle job costs (issue 41): `spendcap run -- sleep` at the
#            defaults, wakeups/s and CPU % of one core of spendcap and its guard, as root (the
#            process connector, which counts the machine's forks) and with an ordinary user's
#            detector; $SPENDCAP_BENCH_BASELINE (another spendcap binary) runs side by side.
#   --markdown FILE: the table of figures and goals also written to FILE, as markdown.
# Every mode ends with that table, for the figures it measured, with the machine's load average
# (/proc/loadavg) at the start and at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="" markdown=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick | --pg | --table | --idle) mode=$1 ;;
    --markdown) markdown=$2; shift ;;
    *) echo "usage: scripts/bench.sh [--quick | --pg | --table | --idle] [--markdown FILE]" >&2; exit 2 ;;
  esac
  shift
done
figures=$(mktemp /tmp/spendcap-bench-figures.XXXXXX)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
if [ "${SPENDCAP_BENCH_NO_SETUP:-0}" != 1 ]; then ./scripts/setup.sh >/dev/null; fi
targets="spendcap exec_overhead ledger_bench report_bench floor"
if [ "$mode" = "--pg" ]; then targets="spendcap ledger_bench floor"; fi
if [ "$mode" = "--table" ]; then targets="spendcap ledger_bench report_bench floor"; fi
if [ "$mode" = "--idle" ]; then targets="spendcap"; fi
# shellcheck disable=SC2086 # the targets are words
cmake --build build -j"${JOBS:-2}" --target $targets >/dev/null

rounds=60 seconds=60 kill_runs=3 sizes=10,100,1000 overshoot_runs=20 ledger_seconds=3 runs=1000000
if [ "$mode" = "--quick" ]; then
  rounds=30 seconds=10 kill_runs=1 sizes=10,100 overshoot_runs=5 ledger_seconds=1 runs=100000
fi
if [ "$mode" = "--pg" ]; then rounds=20; fi
if [ "$mode" = "--table" ]; then rounds=30 ledger_seconds=2; fi

# The table of figures and goals (issue 32), from the NAME=VALUE lines the parts left in $figures.
summary() {
  python3 - "$figures" "$load_start" "$(cut -d' ' -f1-3 /proc/loadavg)" "$markdown" <<'PY'
import datetime, os, sys
path, load_start, load_end, markdown = sys.argv[1:5]
f = {}
for line in open(path):
    if "=" in line:
        key, value = line.strip().split("=", 1)
        f[key] = float(value)
rows = []
def row(name, value, goal, met):
    rows.append((name, value, goal, "-" if met is None else ("yes" if met else "**no**")))
def have(*keys):
    return all(k in f for k in keys)
if have("run_sqlite_ms", "timeout_ms", "run_sqlite_ratio"):
    row("`spendcap run --quiet --rate 1 --budget 100 -- true` vs `timeout 100 true`, wall",
        "%.1f vs %.1f ms (%.2fx)" % (f["run_sqlite_ms"], f["timeout_ms"], f["run_sqlite_ratio"]),
        "<= 1.5x", f["run_sqlite_ratio"] <= 1.5)
if have("run_sqlite_cpu_ms", "timeout_cpu_ms", "run_sqlite_cpu_ratio"):
    row("the same, CPU", "%.1f vs %.1f ms (%.2fx)" % (
        f["run_sqlite_cpu_ms"], f["timeout_cpu_ms"], f["run_sqlite_cpu_ratio"]),
        "<= 2x", f["run_sqlite_cpu_ratio"] <= 2)
if have("floor_ms", "floor_cpu_ms", "run_vs_floor", "run_vs_floor_cpu"):
    row("the same vs the floor of its guarantees (tests/bench/floor.c), wall / CPU",
        "%.1f vs %.1f ms (%.2fx) / %.1f vs %.1f ms (%.2fx); the floor is %.2fx `timeout`" % (
            f["run_sqlite_ms"], f["floor_ms"], f["run_vs_floor"], f["run_sqlite_cpu_ms"],
            f["floor_cpu_ms"], f["run_vs_floor_cpu"], f["floor_ratio"]),
        "<= 1.3x", f["run_vs_floor"] <= 1.3 and f["run_vs_floor_cpu"] <= 1.3)
if have("idle_wakeups_per_s", "idle_cpu_percent"):
    row("an idle run (`run -- sleep`, defaults, an ordinary user's detector): wakeups/s, CPU",
        "%.2f/s, %.3f%% of a core" % (f["idle_wakeups_per_s"], f["idle_cpu_percent"]),
        "<= 2/s, <= 0.05%", f["idle_wakeups_per_s"] <= 2 and f["idle_cpu_percent"] <= 0.05)
if have("version_ms", "ps_ms"):
    row("`spendcap --version` / `spendcap ps`", "%.1f / %.1f ms" % (f["version_ms"], f["ps_ms"]),
        "-", None)
if have("pg_vs_sqlite"):
    row("a run with a durable PostgreSQL ledger vs SQLite", "%.2fx" % f["pg_vs_sqlite"],
        "<= 1.5x", f["pg_vs_sqlite"] <= 1.5)
if have("pgbouncer_vs_sqlite"):
    row("the same through pgbouncer (transaction pooling)", "%.2fx" % f["pgbouncer_vs_sqlite"],
        "<= 1.5x", f["pgbouncer_vs_sqlite"] <= 1.5)
if have("pg_heartbeats_32"):
    row("heartbeats/s at 32 writers, durable PostgreSQL", "{:,.0f}".format(f["pg_heartbeats_32"]),
        ">= 2,000", f["pg_heartbeats_32"] >= 2000)
if have("report_team_experiment_s"):
    row("`report --by team --by experiment`, 1M runs, {:,.0f} groups".format(
        f.get("report_team_experiment_groups", 0)), "%.3f s" % f["report_team_experiment_s"],
        "<= 0.3 s", f["report_team_experiment_s"] <= 0.3)
if have("report_experiment_s"):
    row("`report --by experiment`, 1M runs", "%.3f s" % f["report_experiment_s"], "<= 0.2 s",
        f["report_experiment_s"] <= 0.2)
date = datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%MZ")
lines = ["Measured %s, %d cores, load average %s at the start, %s at the end." % (
    date, os.cpu_count(), load_start, load_end), "",
    "| figure | measured | goal | met |", "|---|---|---|---|"]
lines += ["| %s | %s | %s | %s |" % r for r in rows]
text = "\n".join(lines) + "\n"
print("## Figures and goals\n")
print(text)
if markdown:
    with open(markdown, "w") as out:
        out.write(text)
PY
}

echo "## Machine"
echo "$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -sr)," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg) at the start, $(date -u +%Y-%m-%dT%H:%MZ)"
echo

if [ "$mode" = "--idle" ]; then
  trap 'rm -f "$figures"' EXIT
  baseline=()
  if [ -n "${SPENDCAP_BENCH_BASELINE:-}" ]; then baseline=(--baseline "$SPENDCAP_BENCH_BASELINE"); fi
  echo "## Idle supervision, as root (the netlink process connector: the machine's forks wake it)"
  python3 tests/bench/idle_bench.py ./build/spendcap "${baseline[@]}" --seconds 10 --rounds 3
  echo "## Idle supervision, the detector of an ordinary user (no connector)"
  python3 tests/bench/idle_bench.py ./build/spendcap "${baseline[@]}" --seconds 10 --rounds 3 \
    --switches no-proc-connector --figures "$figures"
  summary
  exit 0
fi

pg_url=""
pg_bin=/usr/lib/postgresql/15/bin
if [ "$mode" = "--pg" ]; then
  if [ ! -x $pg_bin/initdb ]; then
    echo "bench.sh --pg: no $pg_bin/initdb (install the postgresql server package)" >&2
    exit 1
  fi
  pg_url=durable-only  # the throwaway test server is not needed
  trap 'stop_durable; rm -f "$figures"' EXIT
elif [ "$mode" = "--table" ]; then
  pg_url=""
  if [ -x $pg_bin/initdb ]; then pg_url=durable-only; fi
  trap 'stop_durable; rm -f "$figures"' EXIT
elif [ -x $pg_bin/initdb ]; then
  ./scripts/pg-test-server.sh start >/dev/null
  trap './scripts/pg-test-server.sh stop >/dev/null; stop_durable; rm -f "$figures"' EXIT
  pg_url="$(eval "$(./scripts/pg-test-server.sh env)" && echo "$SPENDCAP_TEST_PG_URL")"
fi

# The durable server the PostgreSQL figures come from (issue 23): fsync and synchronous_commit on,
# scram-sha-256 over TCP on 127.0.0.1, the writers as a runner role (spendcap_runner). Its own
# directory and port ($SPENDCAP_PG_DURABLE_DIR, $SPENDCAP_PG_DURABLE_PORT), removed at the end.
durable_dir=${SPENDCAP_PG_DURABLE_DIR:-/tmp/spendcap-pg-durable.$(id -u)}
durable_port=${SPENDCAP_PG_DURABLE_PORT:-55433}
durable_bouncer_port=${SPENDCAP_PGBOUNCER_DURABLE_PORT:-$((durable_port + 1000))}
durable_owner_url="" durable_runner_url="" durable_bouncer_url=""
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
pg_super() { if [ "$(id -u)" = 0 ]; then echo postgres; else id -un; fi; }
start_durable() {
  rm -rf "$durable_dir" && mkdir -p "$durable_dir"
  if [ "$(id -u)" = 0 ]; then chown postgres "$durable_dir"; fi
  local secret
  secret=$(od -An -tx1 -N12 /dev/urandom | tr -d ' \n')
  echo "$secret" | as_postgres tee "$durable_dir/pw" >/dev/null
  as_postgres $pg_bin/initdb -D "$durable_dir/data" -U "$(pg_super)" --auth-local=trust \
    --auth-host=scram-sha-256 --pwfile="$durable_dir/pw" -E UTF8 >/dev/null
  as_postgres setsid $pg_bin/pg_ctl -D "$durable_dir/data" -l "$durable_dir/server.log" -w -t 60 \
    start -o "-k $durable_dir -p $durable_port -c listen_addresses=127.0.0.1 -c fsync=on \
    -c synchronous_commit=on -c password_encryption=scram-sha-256 -c max_connections=200" >/dev/null
  # On stdin, not in argv: the password.
  echo "CREATE ROLE spendcap_runner NOLOGIN;
        CREATE ROLE bench_runner LOGIN PASSWORD '$secret' IN ROLE spendcap_runner;" |
    psql -X -q -h "$durable_dir" -p "$durable_port" -U "$(pg_super)" -d postgres >/dev/null
  # One password for both roles, through libpq's PGPASSWORD: never in a url or argv.
  export PGPASSWORD=$secret
  durable_owner_url="postgresql://$(pg_super)@127.0.0.1:$durable_port/postgres"
  durable_runner_url="postgresql://bench_runner@127.0.0.1:$durable_port/postgres"
  # A pgbouncer in front of it (transaction pooling, scram: it checks the client against the
  # server's verifier, read by auth_query, and logs in to the server with the client's proof):
  # a run borrows a warm backend instead of starting one.
  if [ -x /usr/sbin/pgbouncer ]; then
    as_postgres tee "$durable_dir/pgbouncer.ini" >/dev/null <<INI
[databases]
* = host=127.0.0.1 port=$durable_port
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $durable_bouncer_port
unix_socket_dir = $durable_dir
auth_type = scram-sha-256
auth_file = $durable_dir/pgbouncer.users
auth_user = $(pg_super)
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 40
logfile = $durable_dir/pgbouncer.log
pidfile = $durable_dir/pgbouncer.pid
INI
    echo "\"$(pg_super)\" \"$secret\"" | as_postgres tee "$durable_dir/pgbouncer.users" >/dev/null
    chmod 600 "$durable_dir/pgbouncer.users"
    as_postgres /usr/sbin/pgbouncer -d -q "$durable_dir/pgbouncer.ini"
    for _ in $(seq 100); do [ -f "$durable_dir/pgbouncer.pid" ] && break; sleep 0.1; done
    durable_bouncer_url="postgresql://bench_runner@127.0.0.1:$durable_bouncer_port/postgres"
  fi
}
stop_durable() {
  if [ -f "$durable_dir/pgbouncer.pid" ]; then kill "$(cat "$durable_dir/pgbouncer.pid")" || true; fi
  if [ -d "$durable_dir/data" ]; then
    as_postgres $pg_bin/pg_ctl -D "$durable_dir/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$durable_dir"
}

if [ -n "$pg_url" ]; then
  start_durable
  ./build/spendcap ps --ledger "$durable_owner_url" >/dev/null  # the owner creates the schema
fi

pg_parts() {
  echo "### PostgreSQL on the durable server (fsync, synchronous_commit, scram over TCP; goal: >= 2,000 heartbeats/s at 32 writers, also on one hot team)"
  echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
  ./build/tests/bench/ledger_bench --seconds "$ledger_seconds" --ledger "$durable_owner_url" \
    --runner-ledger "$durable_runner_url" | tee "$figures.ledger"
  sed -n 's/^ *32 writer processes, four teams: *\([0-9]*\) heartbeats.*/pg_heartbeats_32=\1/p' \
    "$figures.ledger" | head -1 >>"$figures"
  rm -f "$figures.ledger"
  echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
  if [ "$mode" = "--table" ]; then return; fi
  echo "### pg_test_fsync on the durable server's filesystem (1 s per method)"
  (cd "$durable_dir" && as_postgres $pg_bin/pg_test_fsync -s 1 -f "$durable_dir/fsync.test" \
    | sed -n '/one 8kB write/,/^$/p')
  echo "### multi-node: one node's trip stops the others (goal: within one --sync)"
  python3 tests/bench/multi_node_bench.py ./build/spendcap --ledger "$durable_runner_url"
}

# The reports over 1,000,000 runs: each case's rollups median into $figures.
report_parts() {
  local reuse=()
  if [ -n "${SPENDCAP_BENCH_REPORT_DIR:-}" ]; then
    reuse=(--dir "$SPENDCAP_BENCH_REPORT_DIR" --reuse yes)
  fi
  ./build/tests/bench/report_bench --runs "$runs" "${reuse[@]}" | tee "$figures.report"
  sed -n 's/^report --by team --by experiment over .* (\([0-9]*\) groups.*rollups median \([0-9.]*\) s.*/report_team_experiment_groups=\1\nreport_team_experiment_s=\2/p
          s/^report --by experiment over .*rollups median \([0-9.]*\) s.*/report_experiment_s=\1/p' \
    "$figures.report" >>"$figures"
  rm -f "$figures.report"
}

if [ "$mode" = "--pg" ] || [ "$mode" = "--table" ]; then
  variants=sqlite,pg${durable_bouncer_url:+,pgbouncer}
  if [ "$mode" = "--table" ]; then
    variants=sqlite,version,ps${durable_runner_url:+,pg}${durable_bouncer_url:+,pgbouncer}
  fi
  echo "## Exec overhead, SQLite against PostgreSQL directly and through pgbouncer (goal: PostgreSQL within 1.5x of SQLite)"
  echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
  python3 tests/bench/overhead_bench.py ./build/spendcap --runs "$rounds" --variants "$variants" \
    --floor ./build/tests/bench/floor \
    ${durable_runner_url:+--pg "$durable_runner_url"} \
    ${durable_bouncer_url:+--pgbouncer "$durable_bouncer_url"} --figures "$figures"
  echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "## Ledger"
  if [ -n "$durable_owner_url" ]; then pg_parts; fi
  if [ "$mode" = "--table" ]; then
    echo "## Reports"
    report_parts
  fi
  summary
  exit 0
fi

echo "## Exec overhead"
python3 tests/bench/overhead_bench.py ./build/spendcap --runs "$rounds" --floor ./build/tests/bench/floor \
  --variants "sqlite,webhook,version,ps${durable_runner_url:+,pg}${durable_bouncer_url:+,pgbouncer},isolation-none,no-cgroup,no-proc-connector,tmpfs" \
  ${durable_runner_url:+--pg "$durable_runner_url"} \
  ${durable_bouncer_url:+--pgbouncer "$durable_bouncer_url"} --figures "$figures"
echo "## Kill latency"
if [ "$(id -u)" -eq 0 ]; then
  python3 tests/bench/kill_bench.py ./build/spendcap --runs "$kill_runs" --sizes "$sizes"
else
  echo "(skipped: creating the floor's cgroup needs root)"
fi
echo "## Spend overshoot and use"
python3 tests/bench/overshoot_bench.py ./build/spendcap --runs "$overshoot_runs"
echo "## Supervision"
python3 tests/bench/supervision_bench.py ./build/spendcap --seconds "$seconds" --kill-runs 0
echo "## Ledger"
./build/tests/bench/ledger_bench --seconds "$ledger_seconds" --runs "$runs"
if [ -n "$durable_owner_url" ]; then pg_parts; fi
echo
echo "## Reports"
echo "goals (issue 23 item 3, over 1,000,000 runs, from the rollups): --by experiment <= 0.2 s," \
  "--by team --by experiment <= 0.3 s, the same table as a scan of every run (checked each pass);" \
  "load: $(cut -d' ' -f1-3 /proc/loadavg)"
report_parts
summary
