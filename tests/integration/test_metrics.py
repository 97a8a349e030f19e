"""--metrics-dir (issue 11, test 5): one Prometheus textfile per run, replaced atomically every
interval, checked by Debian's promtool and served by a real node_exporter's textfile collector;
files never seen half-written; two concurrent runs keep their own files; on the runs' end their
files go and the team's summary holds both (a lock file: no update lost)."""
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import unittest
import urllib.request

from spendcap_testlib import LedgerTest, SPENDCAP, free_port, wait_until

PROMTOOL = shutil.which("promtool")
NODE_EXPORTER = shutil.which("prometheus-node-exporter")
MICROS = 1_000_000
FAKE_NVML = os.path.join(os.path.dirname(SPENDCAP), "tests", "fake_nvml", "current",
                         "libnvidia-ml.so.1")

# The text exposition format, written from its specification: comment lines, or a sample
# name{label="value",...} value, label values with \\, \" and \n escaped.
SAMPLE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)'
    r'(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
    r'(,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*")*)?\})?'
    r' (?P<value>-?[0-9.eE+-]+|NaN|[+-]Inf)$')
RUN_METRICS = ["spendcap_run_spend_usd", "spendcap_run_ceiling_usd", "spendcap_run_budget_usd",
               "spendcap_run_burn_rate_usd_per_hour"]


def parse_exposition(text):
    """{name: [(labels text, value)]} of a whole file; raises ValueError on any bad line or a
    file cut short (no final newline, or a metric declared without its sample)."""
    if not text.endswith("\n"):
        raise ValueError("no final newline: cut short")
    samples, declared = {}, []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            declared.append(line.split()[2])
            continue
        if line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        if not match:
            raise ValueError("not a sample line: %r" % line)
        samples.setdefault(match.group(1), []).append((match.group(3) or "",
                                                       float(match.group("value"))))
    for name in declared:
        if name not in samples:
            raise ValueError("%s declared without a sample" % name)
    return samples


def units_wrong(samples):
    """The money series whose name's unit is not their currency label's (a metric refers to one
    unit: spendcap_..._usd... carries currency="USD")."""
    wrong = []
    for name, series in samples.items():
        if not re.search(r"_(spend|ceiling|budget|burn_rate)", name):
            continue  # not money: GPU ratios and joules carry the label, not a currency unit
        for labels, _ in series:
            match = re.search(r'currency="([A-Z]{3})"', labels)
            if match and "_%s" % match.group(1).lower() not in name:
                wrong.append((name, labels))
    return wrong


class MetricsTest(LedgerTest):
    def setUp(self):
        super().setUp()
        self.dir = self.path("textfiles")
        os.mkdir(self.dir)
        self.write_policy({"defaults": {"grace": "0s", "kill_after": "0s", "sync": "1s"}})

    def start_run(self, experiment, release, extra=(), env=None):
        err = open(self.path(experiment + ".err"), "w")
        self.addCleanup(err.close)
        process = self.start_spendcap(
            ["run", "--rate", "36", "--budget", "5", "--interval", "100ms", "--team", "vision",
             "--experiment", experiment] + list(extra) +
            ["--", sys.executable, "-c",
             "import os, time\n"
             "end = time.monotonic() + 90\n"
             "while not os.path.exists(%r) and time.monotonic() < end: time.sleep(0.05)" % release],
            extra_env=env or {"SPENDCAP_NVML_LIBRARY": "none"}, stdout=subprocess.DEVNULL,
            stderr=err)
        self.addCleanup(process.wait)
        return process

    def run_files(self):
        return sorted(f for f in os.listdir(self.dir)
                      if f.startswith("spendcap_") and f.endswith(".prom")
                      and not f.startswith("spendcap_team_"))

    def promtool(self, text):
        return subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                              text=True, timeout=60)

    def scrape(self, port):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
                return r.read().decode()
        except OSError:
            return ""

    @unittest.skipUnless(PROMTOOL and NODE_EXPORTER,
                         "needs Debian's prometheus and prometheus-node-exporter")
    def test_files_checked_served_atomic_and_summarised(self):
        release = self.path("release")
        # One run takes the directory from the flag, the other from the policy's metrics_dir; an
        # experiment name with a quote and a backslash checks the label escaping end to end.
        first = self.start_run("resnet", release, ["--metrics-dir", self.dir])
        self.write_policy({"defaults": {"grace": "0s", "kill_after": "0s", "sync": "1s"},
                           "metrics_dir": self.dir})
        odd = 'vit "large" \\ v2'
        second = self.start_run(odd, release)
        self.addCleanup(lambda: open(release, "a").close())  # first, if the test fails early
        wait_until(lambda: len(self.run_files()) == 2, 60, what="both runs' metrics files")

        # A reader that parses every snapshot it can open while the runs write theirs.
        snapshots, errors, stop = [0], [], threading.Event()

        def reader():
            while not stop.is_set():
                for name in self.run_files():
                    try:
                        with open(os.path.join(self.dir, name)) as f:
                            text = f.read()
                    except FileNotFoundError:
                        continue
                    try:
                        samples = parse_exposition(text)
                        for metric in RUN_METRICS:
                            if metric not in samples:
                                raise ValueError("%s missing" % metric)
                        snapshots[0] += 1
                    except ValueError as error:
                        errors.append((name, str(error), text))

        thread = threading.Thread(target=reader)
        thread.start()
        try:
            ids = {}
            for name in self.run_files():
                with open(os.path.join(self.dir, name)) as f:
                    text = f.read()
                checked = self.promtool(text)
                self.assertEqual(checked.returncode, 0, checked.stdout + checked.stderr + text)
                labels = parse_exposition(text)["spendcap_run_spend_usd"][0][0]
                run_id = re.search(r'run_id="([^"]*)"', labels).group(1)
                self.assertEqual(name, "spendcap_%s.prom" % run_id)
                ids["odd" if "vit" in labels else "resnet"] = run_id
                # GPUs not measured (no NVML): left out, not written as 0.
                self.assertNotIn("gpu", text)
            with open(os.path.join(self.dir, "spendcap_%s.prom" % ids["odd"])) as f:
                self.assertIn('experiment="vit \\"large\\" \\\\ v2"', f.read())
            self.assertEqual(len(set(ids.values())), 2, "each run has its own file")

            port = free_port()
            exporter = subprocess.Popen(
                [NODE_EXPORTER, "--web.listen-address=127.0.0.1:%d" % port,
                 "--collector.textfile.directory", self.dir, "--collector.disable-defaults",
                 "--collector.textfile"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.addCleanup(exporter.wait)
            self.addCleanup(exporter.kill)

            def spend_served():
                found = {}
                for line in self.scrape(port).splitlines():
                    if line.startswith("spendcap_run_spend_usd{"):
                        run_id = re.search(r'run_id="([^"]*)"', line).group(1)
                        found[run_id] = float(line.rsplit(" ", 1)[1])
                return found

            wait_until(lambda: set(spend_served()) == set(ids.values()), 60,
                       interval=0.2, what="node_exporter serving both runs' spend")
            # The spend goes up as the runs go on: the files are rewritten, not written once.
            at_first = spend_served()
            wait_until(lambda: all(v > at_first[k] for k, v in spend_served().items()), 60,
                       interval=0.2, what="the served spend to grow")
            served = self.scrape(port)
            self.assertIn('experiment="vit \\"large\\" \\\\ v2"', served)
            self.assertIn("\nnode_textfile_scrape_error 0\n", served)
            wait_until(lambda: snapshots[0] >= 50, 60, interval=0.05,
                       what="the reader to parse 50 snapshots")
        finally:
            stop.set()
            thread.join()
        self.assertEqual(errors[:1], [], "a snapshot seen half-written")

        with open(release, "w"):
            pass
        self.assertEqual(first.wait(timeout=120), 0)
        self.assertEqual(second.wait(timeout=120), 0)
        self.assertEqual(self.run_files(), [], "each run's file is removed when it ends")
        team_file = os.path.join(self.dir, "spendcap_team_vision.prom")
        with open(team_file) as f:
            summary = f.read()
        checked = self.promtool(summary)
        self.assertEqual(checked.returncode, 0, checked.stdout + checked.stderr + summary)
        samples = parse_exposition(summary)
        self.assertEqual(samples["spendcap_team_runs_finished_total"][0][1], 2)
        spend = sum(r["spend_micros"] for r in self.runs())
        self.assertEqual(round(samples["spendcap_team_spend_usd_total"][0][1] * MICROS), spend)
        wait_until(lambda: "spendcap_team_spend_usd_total{" in self.scrape(port), 60,
                   interval=0.2, what="node_exporter serving the team's summary")
        self.assertNotIn("spendcap_run_spend_usd{", self.scrape(port))

    @unittest.skipUnless(os.path.exists(FAKE_NVML), "the fake NVML is not built")
    def test_measured_gpu_figures(self):
        # The fake NVML: the run's GPU 80% busy at 250 W, measured while the run goes on.
        with open(self.path("scenario.json"), "w") as f:
            json.dump({"devices": [{"uuid": "GPU-fake-0", "pid_file": self.path("pids"),
                                    "segments": [{"util": 80, "power_w": 250}]}]}, f)
        env = {"SPENDCAP_NVML_LIBRARY": FAKE_NVML,
               "FAKE_NVML_SCENARIO": self.path("scenario.json"), "CUDA_VISIBLE_DEVICES": "0"}
        release = self.path("release")
        self.addCleanup(lambda: open(release, "a").close())
        run = self.start_spendcap(
            ["run", "--rate", "36", "--budget", "5", "--interval", "100ms", "--team", "vision",
             "--metrics-dir", self.dir, "--", "sh", "-c",
             "echo $$ $(readlink /proc/$$/ns/pid) > %s; i=0; while [ ! -e %s ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i+1)); "
             "done" % (self.path("pids"), release)],
            extra_env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(run.wait)

        def gpu_samples():
            for name in self.run_files():
                try:
                    with open(os.path.join(self.dir, name)) as f:
                        samples = parse_exposition(f.read())
                except FileNotFoundError:
                    return None
                if "spendcap_run_gpu_utilisation_ratio" in samples:
                    return samples
            return None

        wait_until(lambda: gpu_samples() and
                   gpu_samples()["spendcap_run_gpu_energy_joules"][0][1] > 250,
                   60, interval=0.1, what="the GPU figures in the run's file")
        samples = gpu_samples()
        self.assertAlmostEqual(samples["spendcap_run_gpu_utilisation_ratio"][0][1], 0.8,
                               delta=0.05)
        open(release, "w").close()
        self.assertEqual(run.wait(timeout=120), 0)
        self.assertEqual(self.run_files(), [])

    @unittest.skipUnless(PROMTOOL, "needs Debian's prometheus (promtool)")
    @unittest.skipUnless(PROMTOOL, "needs Debian's prometheus (promtool)")
    def test_team_gauges_move_while_a_run_goes_on(self):
        """Issue 38: the team's budget gauges are refreshed from the ledger's answer to each
        heartbeat, not only when a run ends: during a long run the team file's
        spendcap_team_budget_spent_usd rises above 0, then grows, its remaining gauge falls, and
        promtool passes it; at the end the gauges are the ledger's figures. Negative control:
        main's binary writes the team file only when the run ends (no file while it runs)."""
        self.write_policy({"defaults": {"grace": "0s", "kill_after": "0s", "sync": "1s"},
                           "metrics_dir": self.dir,
                           "budgets": {"team": {"vision": {"amount": 100, "period": "month"}}}})
        applied = self.run_spendcap(["budgets", "apply", self.path("spendcap.json")])
        self.assertEqual(applied.returncode, 0, applied.stderr)
        release = self.path("release")
        run = self.start_run("long", release)
        self.addCleanup(lambda: open(release, "a").close())
        team_file = os.path.join(self.dir, "spendcap_team_vision.prom")
        spent = "spendcap_team_budget_spent_usd"

        def gauges():
            """{name: value} of the team file's samples; {} while it is not there."""
            try:
                with open(team_file) as f:
                    text = f.read()
            except FileNotFoundError:
                return {}
            return {name: series[0][1] for name, series in parse_exposition(text).items()}

        def rising():
            self.assertIsNone(run.poll(), "the run ended before its team's gauges moved")
            return gauges().get(spent, 0) > 0
        wait_until(rising, 30, interval=0.1, what="the team's spent gauge above 0 while it runs")
        first = gauges()
        wait_until(lambda: gauges()[spent] > first[spent] or run.poll() is not None, 30,
                   interval=0.1, what="the team's spent gauge to grow")
        later = gauges()
        self.assertIsNone(run.poll(), "the run ended before its team's gauge grew")
        self.assertGreater(later[spent], first[spent])
        self.assertEqual(later["spendcap_team_budget_usd"], 100)
        self.assertLess(later["spendcap_team_budget_remaining_usd"], 100)
        self.assertEqual(later["spendcap_team_runs_finished_total"], 0, "no run has ended yet")
        with open(team_file) as f:
            text = f.read()
        checked = self.promtool(text)
        self.assertEqual(checked.returncode, 0, checked.stdout + checked.stderr + text)
        self.assertEqual(units_wrong(parse_exposition(text)), [])
        self.assertNotIn("run_id", text, "no per-run series in the team file")
        with open(release, "w"):
            pass
        self.assertEqual(run.wait(timeout=120), 0)
        # The end: the ledger's figures, this run's final spend counted and its ceiling released.
        end = gauges()
        view = [v for v in self.spendcap_json(["budgets"]) if v["scope"] == "team:vision"][0]
        spend = sum(r["spend_micros"] for r in self.runs())
        self.assertEqual(round(end[spent] * MICROS), spend)
        self.assertAlmostEqual(end[spent], view["spent"], places=6)
        self.assertAlmostEqual(end["spendcap_team_budget_remaining_usd"], 100 - spend / MICROS,
                               places=6)
        self.assertEqual(end["spendcap_team_runs_finished_total"], 1)
        print("team spent gauge %.6f -> %.6f while running, %.6f at the end" %
              (first[spent], later[spent], end[spent]), file=sys.stderr)

    def test_checkers_reject_broken_files(self):
        # Negative controls: the checks above can fail.
        good = ('# HELP spendcap_run_spend_usd x\n# TYPE spendcap_run_spend_usd gauge\n'
                'spendcap_run_spend_usd{run_id="a"} 1.5\n')
        self.assertEqual(self.promtool(good).returncode, 0)
        parse_exposition(good)
        for broken in (good[:-4], good.replace('"a"', '"a"b"'), good[:good.index("spendcap_run_s")]):
            with self.assertRaises(ValueError):
                parse_exposition(broken)
        self.assertNotEqual(self.promtool(good.replace('"a"', '"a"b"')).returncode, 0)

    @unittest.skipUnless(PROMTOOL, "needs Debian's prometheus (promtool)")
    def test_a_usd_and_a_eur_run_keep_two_series(self):
        # Issue 21: a metric refers to one unit. A USD run, then a EUR run of the same team: the
        # USD series keeps its name and labels (dashboards keep working), the EUR spend has its
        # own, and nothing is summed across currencies.
        spends = {}
        for currency in ("USD", "EUR"):
            self.write_policy({"currency": currency, "metrics_dir": self.dir,
                               "defaults": {"grace": "0s", "kill_after": "0s", "sync": "1s"}})
            status = self.path("status-%s.json" % currency)
            result = self.run_spendcap(
                ["run", "--rate", "36", "--budget", "5", "--interval", "100ms", "--team",
                 "vision", "--experiment", currency.lower(), "--status-file", status, "--",
                 sys.executable, "-c", "import time; time.sleep(0.5)"])
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertNotIn("metrics file", result.stderr)
            with open(status) as f:
                spends[currency] = json.load(f)["spend"]
            with open(os.path.join(self.dir, "spendcap_team_vision.prom")) as f:
                text = f.read()
            self.assertEqual(self.promtool(text).returncode, 0, self.promtool(text).stdout)
            samples = parse_exposition(text)
            self.assertEqual(units_wrong(samples), [])
            usd = samples["spendcap_team_spend_usd_total"]
            self.assertEqual([labels for labels, _ in usd], ['team="vision",currency="USD"'])
            self.assertAlmostEqual(usd[0][1], spends["USD"], places=6)
        eur = samples["spendcap_team_spend_eur_total"]
        self.assertEqual([labels for labels, _ in eur], ['team="vision",currency="EUR"'])
        self.assertAlmostEqual(eur[0][1], spends["EUR"], places=6)
        self.assertEqual(samples["spendcap_team_runs_finished_total"][0][1], 2)
        # Negative control: the file as it was before (one series, both currencies added under
        # the USD name with the EUR label) fails the unit check.
        before = ('spendcap_team_spend_usd_total{team="vision",currency="EUR"} %f\n'
                  % (spends["USD"] + spends["EUR"]))
        self.assertNotEqual(units_wrong(parse_exposition(before)), [])

    def test_a_eur_run_file_names_its_unit(self):
        self.write_policy({"currency": "EUR",
                           "defaults": {"grace": "0s", "kill_after": "0s", "sync": "1s"}})
        release = self.path("release")
        run = self.start_run("eur", release, ["--metrics-dir", self.dir])
        files = wait_until(self.run_files, 30, what="the EUR run's file")
        with open(os.path.join(self.dir, files[0])) as f:
            samples = parse_exposition(f.read())
        open(release, "w").close()
        run.communicate(timeout=60)
        self.assertIn("spendcap_run_spend_eur", samples)
        self.assertIn("spendcap_run_burn_rate_eur_per_hour", samples)
        self.assertNotIn("spendcap_run_spend_usd", samples)
        self.assertEqual(units_wrong(samples), [])

    def test_a_directory_it_cannot_use_is_refused(self):
        for bad in (self.path("missing"), self.path("spendcap.json")):
            result = self.run_spendcap(["run", "--rate", "36", "--budget", "1", "--metrics-dir",
                                        bad, "--", "true"])
            self.assertEqual(result.returncode, 125, result.stderr)
            self.assertIn("--metrics-dir " + bad, result.stderr)
        self.assertEqual(self.runs(), [], "refused before anything was recorded")


if __name__ == "__main__":
    unittest.main()
