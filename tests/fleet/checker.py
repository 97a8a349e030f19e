#!/usr/bin/env python3
"""The fleet test's checker (issue 33): proves seven invariants from a history (fleet.py writes
it: JSON lines) and the ledger dump at its end, and figures the fleet's recovery.

Records it reads (each has `t`, unix seconds, and `kind`):
  config      budgets [{kind, name, amount_micros}], ceiling_seconds, shutdown_seconds, hosts
  run_start   label, host                        a `spendcap run` started
  run_end     label, host, rc, run_id, status, reason, spend, spooled
  tick        ok, now, runs [rows that changed], outbox [entries first seen], outbox_size
  spooled     host, file, final {id, status, spend_micros, ...}   a spool file appeared
  spool_gone  host, file
  webhook     webhook_id, event, run_id          the receiver got a POST
  fault_start / fault_end   fault, started (end), and the fault's parameters
  sigkill_wrapper  label;  survivors pids;  final ledger {runs, usage, outbox}

A ledger row: id, tags (JSON text with fleet=LABEL), host, team, experiment, status, reason,
exit_code, spend, ceiling (micro-units), hb (heartbeat_at), reconciled, started_at, finished_at.

    tests/fleet/checker.py HISTORY.jsonl      prints the report; exit 1 when an invariant fails
"""
import json
import sys

INVARIANTS = [
    ("budget_never_over", "no team or experiment spent over its budget (to the micro-unit)"),
    ("ceilings_within_budget", "at no time did spend plus granted ceilings exceed a budget"),
    ("one_final_row_per_run", "every run has exactly one final row; a lost run reconciled once"),
    ("cut_hosts_end_within_ceilings", "a host cut off past its ceilings: its runs ended 121, "
                                      "within their ceilings"),
    ("spool_replayed_once", "every spooled final row was replayed, once"),
    ("webhooks_exactly_once", "every event the outbox owed delivered exactly once per webhook-id, "
                              "after the receiver came back"),
    ("no_survivors", "nothing of any tree survived"),
]
FAULTS_WITHOUT_HEARTBEATS = ("webhook_down",)


# The refusal of a user's 11th and later refused run in a minute: counted, with no run row.
COUNTED_ONLY = "the ledger counts refused runs instead of recording each"


def label_of(row):
    tags = row.get("tags") or ""
    try:
        parsed = json.loads(tags)
        if isinstance(parsed, dict):
            return parsed.get("fleet")
        if isinstance(parsed, list):
            for item in parsed:
                if isinstance(item, str) and item.startswith("fleet="):
                    return item[6:]
                if isinstance(item, (list, tuple)) and len(item) == 2 and item[0] == "fleet":
                    return item[1]
    except ValueError:
        pass
    for part in tags.replace(";", ",").split(","):
        if part.strip().startswith("fleet="):
            return part.strip()[6:]
    return None


def in_scope(row, budget):
    if budget["kind"] == "team":
        return row.get("team") == budget["name"]
    if budget["kind"] == "experiment":
        return row.get("experiment") == budget["name"]
    return False


def is_final(row):
    return row.get("status") != "running"


class Check:
    def __init__(self, records):
        self.records = records
        self.by_kind = {}
        for r in records:
            self.by_kind.setdefault(r["kind"], []).append(r)
        configs = self.of("config")
        self.config = configs[0] if configs else {}
        self.budgets = self.config.get("budgets", [])
        finals = self.of("final")
        ledger = finals[-1].get("ledger") if finals else None
        self.ledger = ledger
        self.rows = {r["id"]: r for r in (ledger or {}).get("runs", [])}
        self.starts = {r["label"]: r for r in self.of("run_start")}
        self.ends = {r["label"]: r for r in self.of("run_end")}
        self.killed = {r["label"] for r in self.of("sigkill_wrapper")}
        for f in self.of("fault_end"):
            if f.get("fault") == "node_crash":
                self.killed.update(f.get("labels", []))
        self.faults = [f for f in self.of("fault_end")]

    def of(self, kind):
        return self.by_kind.get(kind, [])

    def state_at(self, moment):
        """Every run's row as last observed before `moment`."""
        state = {}
        for tick in self.of("tick"):
            if tick["t"] >= moment:
                break
            for row in tick.get("runs", []) if tick.get("ok") else []:
                state[row["id"]] = row
        return state

    # ---- the invariants: each returns a list of violations ----

    def budget_never_over(self):
        if self.ledger is None:
            return ["no final ledger dump"]
        bad = []
        for b in self.budgets:
            spent = sum(r["spend"] for r in self.rows.values() if in_scope(r, b) and is_final(r))
            held = sum(r["ceiling"] for r in self.rows.values()
                       if in_scope(r, b) and not is_final(r))
            if spent + held > b["amount_micros"]:
                bad.append("%s %s: spent %d + held %d micro-units > budget %d" % (
                    b["kind"], b["name"], spent, held, b["amount_micros"]))
            recorded = sum(u["spent_micros"] for u in self.ledger.get("usage", [])
                           if u["scope_kind"] == b["kind"] and u["scope_name"] == b["name"])
            if recorded != spent:
                bad.append("%s %s: the ledger's usage says %d spent, its final rows %d" % (
                    b["kind"], b["name"], recorded, spent))
        return bad

    def ceilings_within_budget(self):
        state, bad = {}, []
        for tick in self.of("tick"):
            if not tick.get("ok"):
                continue
            for row in tick.get("runs", []):
                state[row["id"]] = row
            for b in self.budgets:
                total = sum(r["spend"] if is_final(r) else r["ceiling"]
                            for r in state.values() if in_scope(r, b))
                if total > b["amount_micros"]:
                    bad.append("at %.1f: %s %s: spend + ceilings %d > budget %d" % (
                        tick["t"], b["kind"], b["name"], total, b["amount_micros"]))
        return bad[:20]

    def one_final_row_per_run(self):
        if self.ledger is None:
            return ["no final ledger dump"]
        bad, labels = [], {}
        for row in self.rows.values():
            if not is_final(row):
                bad.append("run %s (%s) is still running at the end" % (row["id"],
                                                                        label_of(row)))
            label = label_of(row)
            if label is None:
                bad.append("run %s has no fleet label" % row["id"])
            elif label in labels:
                bad.append("%s has two rows: %s and %s" % (label, labels[label], row["id"]))
            else:
                labels[label] = row["id"]
        for label, end in self.ends.items():
            if end.get("run_id"):
                row = self.rows.get(end["run_id"])
                if row is None and end["rc"] == 120 and COUNTED_ONLY in end.get("stderr", ""):
                    continue  # past 10 refusals a minute a user's refusal is counted, not a row
                if row is None:
                    bad.append("%s (run %s, exit %s) has no row" % (label, end["run_id"],
                                                                    end["rc"]))
                elif label_of(row) != label:
                    bad.append("%s's run %s is labelled %s" % (label, row["id"], label_of(row)))
                elif end.get("status") and row["status"] != end["status"]:
                    bad.append("%s ended %s (its status file) but its row says %s%s" % (
                        label, end["status"], row["status"],
                        " (charged as lost: its final row was dropped)" if row["reconciled"]
                        else ""))
            elif label not in self.killed and end.get("rc") not in (125, -9, 137):
                bad.append("%s ended with %s and no status file" % (label, end.get("rc")))
        # A row moves running -> [lost, reconciled] -> [final] at most once each, and a final row
        # never changes.
        history = {}
        for tick in self.of("tick"):
            for row in tick.get("runs", []) if tick.get("ok") else []:
                history.setdefault(row["id"], []).append(row)
        for run_id, rows in history.items():
            reconciled, final = 0, None
            for row in rows:
                if row["status"] == "running":
                    if final is not None or reconciled:
                        bad.append("run %s went back to running" % run_id)
                    continue
                if row["status"] == "lost" and row["reconciled"]:
                    if final is not None and not (final["status"] == "lost" and
                                                  final["reconciled"]):
                        bad.append("run %s was final, then reconciled as lost" % run_id)
                    if final is None or not final["reconciled"]:
                        reconciled += 1
                    if reconciled > 1:
                        bad.append("run %s was reconciled %d times" % (run_id, reconciled))
                elif final is not None and not final["reconciled"] and (
                        final["status"], final["spend"]) != (row["status"], row["spend"]):
                    bad.append("run %s's final row changed: %s %d -> %s %d" % (
                        run_id, final["status"], final["spend"], row["status"], row["spend"]))
                final = row
        for label in sorted(self.killed):
            end = self.ends.get(label, {})
            rows = [r for r in self.rows.values() if label_of(r) == label]
            for row in rows:
                if row["status"] == "running":
                    bad.append("%s was killed and its run %s was never reconciled" % (
                        label, row["id"]))
            del end
        return bad

    def cut_hosts_end_within_ceilings(self):
        bad = []
        c = self.config.get("ceiling_seconds", 0)
        shutdown = self.config.get("shutdown_seconds", 0)
        slack = 30.0
        by_label = {label_of(r): r for r in self.rows.values()}
        for f in self.faults:
            if f.get("fault") != "cut" or f.get("seconds", 0) <= c + shutdown:
                continue
            start, end, host = f["started"], f["t"], f["host"]
            for label, s in self.starts.items():
                e = self.ends.get(label)
                if s["host"] != host or s["t"] >= start or e is None or e["t"] <= start + 1:
                    continue
                if label in self.killed:
                    continue
                row = by_label.get(label)
                # Running (admitted, spending) when the cut began: a run whose admission was
                # still on its way holds nothing yet; it ends 125 when the ledger stays
                # unreachable, or starts its job after the cut.
                seen = self.state_at(start).get(row["id"]) if row is not None else None
                if seen is None or seen["status"] != "running" or seen["spend"] <= 0:
                    continue
                # Its ceiling runs out within c of the cut (it was granted at most c ahead),
                # then the kill path; a loaded machine gets some slack.
                if e["t"] > start + c + shutdown + slack and e["t"] > end:
                    bad.append("%s ran on past its ceiling on the cut host %d: ended %.1f s "
                               "after the cut began" % (label, host, e["t"] - start))
                # Once past its ceiling's time it can only have been stopped: 121, or 124 where
                # its own run budget tripped first.
                if e["t"] > start + c + shutdown and e["rc"] not in (121, 124) and e["t"] < end:
                    bad.append("%s ended %s, not 121, while its host was cut off" % (
                        label, e["rc"]))
                if row is not None and row["spend"] > row["ceiling"]:
                    bad.append("%s spent %d past its ceiling %d" % (label, row["spend"],
                                                                      row["ceiling"]))
                if e["rc"] == 121 and e.get("reason") not in (None, "ledger-unreachable"):
                    bad.append("%s ended 121 for %s" % (label, e.get("reason")))
        return bad

    def spool_replayed_once(self):
        if self.ledger is None:
            return ["no final ledger dump"]
        bad = []
        left = self.of("spool_final")
        for record in left:
            for name in record.get("files", []):
                bad.append("host %s: %s is still in the spool" % (record["host"], name))
        for s in self.of("spooled"):
            final = s.get("final")
            if s["file"].endswith(".bad"):
                bad.append("host %s: the spooled row %s was refused" % (s["host"], s["file"]))
                continue
            if not final:
                continue
            row = self.rows.get(final["id"])
            if row is None:
                bad.append("spooled run %s has no row" % final["id"])
            elif (row["status"], row["spend"]) != (final["status"], final["spend_micros"]):
                bad.append("spooled run %s: %s %d spooled, the ledger has %s %d%s" % (
                    final["id"], final["status"], final["spend_micros"], row["status"],
                    row["spend"], " (reconciled as lost)" if row["reconciled"] else ""))
        return bad

    def webhooks_exactly_once(self):
        if self.ledger is None:
            return ["no final ledger dump"]
        bad = []
        owed = {}
        for tick in self.of("tick"):
            for entry in tick.get("outbox", []) if tick.get("ok") else []:
                owed.setdefault(entry["event_id"], tick["t"])
        for entry in self.ledger.get("outbox", []):
            bad.append("event %s (%s) is still in the outbox" % (entry["event_id"],
                                                                entry["event"]))
        received = {}
        for hook in self.of("webhook"):
            received.setdefault(hook["webhook_id"], []).append(hook["t"])
        for webhook_id, times in received.items():
            if len(times) > 1:
                bad.append("webhook-id %s delivered %d times" % (webhook_id, len(times)))
        outages = [(f["started"], f["t"]) for f in self.faults if f.get("fault") == "webhook_down"]
        for event_id, seen in owed.items():
            times = received.get(event_id, [])
            if not times:
                bad.append("event %s was owed (outbox) and never delivered" % event_id)
            for down, up in outages:
                if down <= seen <= up and any(t < up for t in times):
                    bad.append("event %s delivered while the receiver was down" % event_id)
        return bad

    def no_survivors(self):
        records = self.of("survivors")
        if not records:
            return ["no survivors check in the history"]
        return ["process %s survived: %s" % (pid, cmd) for pid, cmd in
                zip(records[-1]["pids"], records[-1].get("commands", []) +
                    [""] * len(records[-1]["pids"]))]

    # ---- figures ----

    def figures(self):
        rows = list(self.rows.values())
        statuses, codes = {}, {}
        for r in rows:
            key = r["status"] + (" (reconciled)" if r["reconciled"] else "")
            statuses[key] = statuses.get(key, 0) + 1
        for e in self.ends.values():
            codes[str(e["rc"])] = codes.get(str(e["rc"]), 0) + 1
        faults = {}
        for f in self.faults:
            faults[f["fault"]] = faults.get(f["fault"], 0) + 1
        windows = [(f["started"], f["t"]) for f in self.faults
                   if f["fault"] not in FAULTS_WITHOUT_HEARTBEATS]
        beats, during, after = {}, [], []
        for tick in self.of("tick"):
            for row in tick.get("runs", []) if tick.get("ok") else []:
                if row["status"] != "running":
                    continue
                last = beats.get(row["id"])
                if last is not None and row["hb"] > last:
                    gap = row["hb"] - last
                    (during if any(a <= row["hb"] and last <= b for a, b in windows)
                     else after).append(gap)
                beats[row["id"]] = row["hb"]
        hosts_of = {label: s["host"] for label, s in self.starts.items()}
        recovery = []
        for f in self.faults:
            end = f["t"]
            affected = {f["host"]} if "host" in f else None
            first = None
            for tick in self.of("tick"):
                if tick["t"] < end or not tick.get("ok"):
                    continue
                for row in tick.get("runs", []):
                    host = hosts_of.get(label_of(row))
                    if row["hb"] > end and (affected is None or host in affected):
                        first = row["hb"] if first is None else min(first, row["hb"])
                if first is not None:
                    break
            item = {"fault": f["fault"], "at": round(f["started"], 1),
                    "lasted_s": round(end - f["started"], 1),
                    "first_heartbeat_after_s": None if first is None else round(first - end, 2)}
            if f["fault"] == "webhook_down":
                hooks = [h["t"] for h in self.of("webhook") if h["t"] >= end]
                item["first_webhook_after_s"] = round(min(hooks) - end, 2) if hooks else None
            recovery.append(item)
        return {"runs_started": len(self.starts), "ledger_rows": len(rows),
                "hosts": self.config.get("hosts"), "slots": self.config.get("slots"),
                "seed": self.config.get("seed"), "statuses": statuses, "exit_codes": codes,
                "faults": faults, "recovery": recovery,
                "heartbeat_gap_s": {
                    "during_faults": {"n": len(during), "p50": percentile(during, 50),
                                      "p99": percentile(during, 99)},
                    "outside_faults": {"n": len(after), "p50": percentile(after, 50),
                                       "p99": percentile(after, 99)}},
                "webhooks_received": len(self.of("webhook")),
                "spooled_rows": len(self.of("spooled"))}


def percentile(values, p):
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(round(p / 100.0 * (len(values) - 1))))], 3)


def check(records):
    c = Check(records)
    results = {}
    for name, text in INVARIANTS:
        violations = getattr(c, name)()
        results[name] = {"held": not violations, "says": text, "violations": violations[:20],
                         "violation_count": len(violations)}
    return {"ok": all(r["held"] for r in results.values()), "invariants": results,
            "figures": c.figures()}


def read_history(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def check_file(path):
    return check(read_history(path))


def format_report(report):
    lines = []
    for name, r in report["invariants"].items():
        lines.append("%-32s %s  %s" % (name, "held" if r["held"] else "FAILED", r["says"]))
        for v in r["violations"]:
            lines.append("    " + v)
    fig = report["figures"]
    lines.append("runs %s (ledger rows %s) on %s hosts; statuses %s; exit codes %s" % (
        fig["runs_started"], fig["ledger_rows"], fig["hosts"], fig["statuses"],
        fig["exit_codes"]))
    lines.append("faults %s" % fig["faults"])
    for item in fig["recovery"]:
        lines.append("  %s" % item)
    lines.append("heartbeat gaps %s" % fig["heartbeat_gap_s"])
    return "\n".join(lines)


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    report = check_file(argv[1])
    print(format_report(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
