"""Webhook benchmark (issue 9; README, "Webhooks"): what a run costs without a webhook (against
another spendcap binary, e.g. the one before webhooks), whether libcurl is mapped, and the time from
trip to the tree being gone with a never-answering endpoint against none.

    python3 tests/bench/webhook_bench.py build/spendcap [/path/to/older/spendcap] [runs]
"""
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import time


def env_for(home):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPENDCAP_")}
    for name in ("data", "state", "config", "tmp"):
        os.makedirs(os.path.join(home, name), exist_ok=True)
    env.update({"XDG_DATA_HOME": home + "/data", "XDG_STATE_HOME": home + "/state",
                "XDG_CONFIG_HOME": home + "/config", "TMPDIR": home + "/tmp"})
    return env


def run_cost(binary, runs):
    home = tempfile.mkdtemp(prefix="spendcap-bench-")
    env = env_for(home)
    args = [binary, "run", "--quiet", "--rate", "36", "--budget", "100", "--", "true"]
    subprocess.run(args, env=env, check=True)  # the ledger exists from here on
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(args, env=env, check=True)
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def curl_mapped(binary, webhook_env):
    """Whether libcurl is in spendcap's /proc/PID/maps while the job runs."""
    home = tempfile.mkdtemp(prefix="spendcap-bench-")
    env = env_for(home)
    env.update(webhook_env)
    args = [binary, "run", "--quiet", "--rate", "36", "--budget", "100"]
    if webhook_env:
        args += ["--webhook-env", "HOOK"]
    process = subprocess.Popen(args + ["--", "sleep", "2"], env=env)
    time.sleep(1)
    with open("/proc/%d/maps" % process.pid) as f:
        mapped = "libcurl" in f.read()
    process.wait()
    return mapped


class Hang(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        time.sleep(30)

    def log_message(self, *args):
        pass


def trip_to_empty(binary, runs, url):
    results = []
    for _ in range(runs):
        home = tempfile.mkdtemp(prefix="spendcap-bench-")
        env = env_for(home)
        status = home + "/status.json"
        args = [binary, "run", "--quiet", "--rate", "36", "--budget", "0.04", "--grace", "0s",
                "--kill-after", "1s", "--status-file", status]
        if url:
            env["HOOK"] = url
            args += ["--webhook-env", "HOOK"]
        start = time.time()
        process = subprocess.Popen(args + ["--", "sleep", "60"], env=env)
        while not os.path.exists(status):
            time.sleep(0.005)
        gone = time.time()
        process.wait()
        with open(status) as f:
            results.append((json.load(f)["trip_to_empty_seconds"], time.time() - gone))
    return results


def main():
    binary = sys.argv[1]
    older = sys.argv[2] if len(sys.argv) > 2 else None
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    print("run cost, no webhook, median of %d: %.1f ms" % (runs, run_cost(binary, runs) * 1000))
    if older:
        print("run cost, older binary:           %.1f ms" % (run_cost(older, runs) * 1000))
    print("libcurl mapped without a webhook:", curl_mapped(binary, {}))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hang)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d/hook" % server.server_address[1]
    print("libcurl mapped with a webhook:   ", curl_mapped(binary, {"HOOK": url}))
    for name, target in (("no webhook", None), ("never-answering webhook", url)):
        results = trip_to_empty(binary, max(3, runs // 4), target)
        trips = sorted(r[0] for r in results)
        exits = sorted(r[1] for r in results)
        print("%s: trip to tree gone median %.3f s (max %.3f); tree gone to exit max %.2f s"
              % (name, trips[len(trips) // 2], trips[-1], exits[-1]))


if __name__ == "__main__":
    main()
