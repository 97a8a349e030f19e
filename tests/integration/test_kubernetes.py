"""Kubernetes (issue 13, test 6): the guide's example Job manifest (docs/guide/schedulers-and-ci.md)
is valid against a schema of the Job fields it uses (no kubectl here), and a container-like run (new PID, mount and UTS namespaces;
spendcap as PID 1; the Downward API variables set) gets SIGTERM as the kubelet sends it: the job
checkpoints within terminationGracePeriodSeconds, the run ends preempted, no zombie is left."""
import json
import os
import re
import shutil
import signal
import subprocess
import textwrap
import time
import unittest

from spendcap_testlib import HERE, REPO, SPENDCAP, LedgerTest, proc_state, wait_until


def readme_manifest():
    import yaml
    with open(os.path.join(REPO, "docs", "guide", "schedulers-and-ci.md")) as f:
        page = f.read()
    section = page.split("## Kubernetes", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    return yaml.safe_load(block)


def descendants(root):
    """{pid: state} of `root`'s descendants, one scan of /proc."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry, "rb") as f:
                    text = f.read()
                fields = text[text.rindex(b")") + 2:].split()
                parents[int(entry)] = (int(fields[1]), chr(fields[0][0]))
            except (OSError, ValueError, IndexError):
                pass
    found, frontier = {}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, state) in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = state
                frontier.append(pid)
    return found


class ManifestTest(unittest.TestCase):
    def setUp(self):
        try:
            import jsonschema  # noqa: F401
            import yaml  # noqa: F401
        except ImportError as error:
            self.skipTest("needs python3-jsonschema and python3-yaml: %s" % error)
        import jsonschema
        with open(os.path.join(HERE, "k8s_job.schema.json")) as f:
            self.validator = jsonschema.Draft202012Validator(json.load(f))

    def test_readme_job_manifest_is_valid_and_aligned(self):
        manifest = readme_manifest()
        errors = [e.message for e in self.validator.iter_errors(manifest)]
        self.assertEqual(errors, [])
        pod = manifest["spec"]["template"]["spec"]
        container = pod["containers"][0]
        self.assertEqual(container["command"][:2], ["spendcap", "run"])
        self.assertIn("--", container["command"])
        fields = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
                  for e in container["env"]}
        self.assertEqual(fields["POD_NAME"], "metadata.name")
        self.assertEqual(fields["POD_NAMESPACE"], "metadata.namespace")
        self.assertEqual(fields["NODE_NAME"], "spec.nodeName")
        # The kubelet SIGKILLs terminationGracePeriodSeconds after SIGTERM: spendcap's signal grace
        # and kill-after (15 s + 5 s) and its final row must fit.
        self.assertGreaterEqual(pod["terminationGracePeriodSeconds"], 15 + 5 + 5)

    def test_the_schema_rejects_a_misplaced_field(self):
        # Negative control: the schema is strict enough to catch a real mistake.
        manifest = readme_manifest()
        pod = manifest["spec"]["template"]["spec"]
        pod["containers"][0]["terminationGracePeriodSeconds"] = 30  # belongs to the pod
        self.assertTrue(list(self.validator.iter_errors(manifest)))
        manifest = readme_manifest()
        manifest["spec"]["template"]["spec"]["containers"][0]["env"][0]["valueFrom"]["fieldRef"][
            "fieldPath"] = "metadata.podname"
        self.assertTrue(list(self.validator.iter_errors(manifest)))


JOB = textwrap.dedent("""\
    import os, signal, sys, time
    ready, checkpoint = sys.argv[1], sys.argv[2]
    def on_checkpoint(signum, frame):
        open(checkpoint, "w").write("saved")
        open(os.environ["SPENDCAP_CHECKPOINT_DONE"], "w").close()
    signal.signal(signal.SIGUSR1, on_checkpoint)
    # An orphan: its parent exits at once, it exits a moment later; someone must reap it.
    if os.fork() == 0:
        if os.fork() == 0:
            time.sleep(0.3)
            open(ready + ".orphan", "w").write("exited")
            os._exit(0)
        os._exit(0)
    os.wait()
    open(ready, "w").write(str(os.getpid()))
    while True:
        time.sleep(1)
    """)


@unittest.skipUnless(shutil.which("unshare") and os.geteuid() == 0, "needs root and unshare(1)")
class ContainerLikeRunTest(LedgerTest):
    def test_sigterm_to_pid1_spendcap_checkpoints_and_ends_preempted(self):
        grace_period = readme_manifest()["spec"]["template"]["spec"][
            "terminationGracePeriodSeconds"] if self._has_yaml() else 30
        job = self.path("job.py")
        with open(job, "w") as f:
            f.write(JOB)
        env = self.spendcap_env({"POD_NAME": "train-vit-x7k2p", "POD_NAMESPACE": "ml",
                                 "NODE_NAME": "gpu-node-3", "KUBERNETES_SERVICE_HOST": "10.0.0.1"})
        container = subprocess.Popen(
            ["unshare", "--pid", "--mount", "--uts", "--fork", "--mount-proc", SPENDCAP, "run",
             "--rate", "1", "--budget", "10", "--status-file", self.path("status.json"), "--",
             "python3", job, self.path("ready"), self.path("checkpoint")],
            env=env, cwd=self.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: container.poll() is None and container.kill())
        self.wait_for_file("ready")
        spendcap = wait_until(lambda: [p for p in descendants(container.pid)
                                       if os.readlink("/proc/%d/exe" % p).endswith("spendcap")
                                       and self._ns_pid(p) == 1], 10,
                              what="spendcap as the container's PID 1")[0]
        # The orphan exited; nothing in the container stays a zombie (PID 1 or the guard reaped it).
        self.wait_for_file("ready.orphan")
        wait_until(lambda: "Z" not in descendants(container.pid).values(), 10,
                   what="no zombie in the container")

        sent = time.monotonic()
        os.kill(spendcap, signal.SIGTERM)  # the kubelet's SIGTERM to the container's PID 1
        out, err = container.communicate(timeout=grace_period + 30)
        took = time.monotonic() - sent
        self.assertLess(took, grace_period, "done before the kubelet's SIGKILL")
        # As PID 1 re-raising SIGTERM cannot kill spendcap: it exits 128 + 15.
        self.assertEqual(container.returncode, 143, err)
        with open(self.path("checkpoint")) as f:
            self.assertEqual(f.read(), "saved")
        status = self.read_json("status.json")
        self.assertEqual(status["status"], "preempted")
        rows = self.runs()
        self.assertEqual([row["status"] for row in rows], ["preempted"])
        tags = json.loads(rows[0]["tags"])
        self.assertEqual(tags.get("k8s_pod"), "train-vit-x7k2p")
        self.assertEqual(tags.get("k8s_namespace"), "ml")
        self.assertEqual(tags.get("k8s_node"), "gpu-node-3")
        self.assert_tree_gone(timeout=5.0)

    @staticmethod
    def _has_yaml():
        try:
            import yaml  # noqa: F401
            return True
        except ImportError:
            return False

    @staticmethod
    def _ns_pid(pid):
        try:
            with open("/proc/%d/status" % pid) as f:
                for line in f:
                    if line.startswith("NSpid:"):
                        return int(line.split()[-1])
        except OSError:
            return None
        return None


if __name__ == "__main__":
    unittest.main()
