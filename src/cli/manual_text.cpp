// The manual's hand-written part: one entry per verb (what --help, `spendcap help VERB` and the
// man pages say beyond the option table), run's option groups, and the environment. Options are
// not described here: their text is the parser's (src/main.cpp).
#include <algorithm>

#include "spendcap/cli/manual.hpp"

namespace spendcap {

const std::vector<VerbText>& verb_texts() {
  static const std::vector<VerbText> texts = {
      {"run",
       "[OPTIONS] -- COMMAND [ARGS...]",
       {"Runs COMMAND under a budget. spendcap launches it, accrues its spend in real time from "
        "the burn rate (--rate, or the policy's price of --gpu and --instance), warns at the "
        "policy's thresholds, and when a budget trips asks the job to checkpoint (the checkpoint "
        "signal, SIGUSR1 by default, to the processes that catch it), waits the grace, sends "
        "SIGTERM, and SIGKILL after the kill-after, until the whole process tree is gone. A run "
        "never ends over its budget: the shutdown reserve, rate x (grace + kill-after + 1s), is "
        "kept out of what it may spend, and a budget smaller than the reserve is refused (120).",
        "The command runs without a shell (its arguments reach it verbatim), with spendcap's "
        "stdin, "
        "stdout, stderr and every other inherited file descriptor; nothing is piped or buffered. "
        "spendcap prints milestone lines only, on stderr: the start line, the 50/80/95% "
        "warnings, progress, the trip and the end line (--quiet: errors only). Everything after "
        "the first -- is the job's.",
        "Every run is recorded in the ledger, so the policy's team, experiment, project and user "
        "budgets hold across runs and concurrent jobs on every host that shares the ledger, and "
        "one --budget holds across every run with the same --job-key (restarts, requeues). "
        "Durations are written 90s, 5m, 1h30m or 250ms; money in the policy's currency (USD by "
        "default), at most 6 decimals; counts take k, M and B (--estimate-steps 50k). Money is "
        "printed in cents from a cent up ($1,234.50, $0.00), with 4 decimals below a cent "
        "($0.0042) and 6 below a hundredth of a cent ($0.000042); a table's money column has "
        "the decimals its most precise cell needs ($1.0000 beside $0.0042); json and csv carry "
        "the full numbers.",
        "The job may append JSON lines to the file $SPENDCAP_PROGRESS names, such as "
        "{\"step\":1200,\"total_steps\":50000,\"metric\":{\"val_acc\":0.83}}: they drive the "
        "projected total (--require-fit), the stall guard (--stall-after) and the cost per step. "
        "It may create $SPENDCAP_CHECKPOINT_DONE once its checkpoint is written, which ends the "
        "grace at once. A line {\"tracker\":{\"wandb\":\"ID\"}} names its experiment "
        "tracker's run id; MLFLOW_RUN_ID, WANDB_RUN_ID and the like in its environment at launch "
        "become the run's tag tracker (report --by tracker), and an id the job reports later "
        "becomes it at the next heartbeat or with the final row (show, report, FOCUS and the end "
        "webhooks have it) unless the run had one at launch, which is kept.",
        "A flag that is not given comes from its $SPENDCAP_* variable (SPENDCAP_TEAM, "
        "SPENDCAP_RATE, SPENDCAP_BUDGET, ...), then from the policy's defaults (team, "
        "experiment, project, rate, budget, grace: the project's spendcap.json, found in the "
        "working directory or up to its git repository's root), so that spendcap run -- CMD is "
        "enough in a project; a locked policy still wins where it locks. --dry-run prints the "
        "terms, where each came from, and the admission verdict, and starts nothing (exit 0, or "
        "120 when the run would be refused).",
        "What spendcap stops is the tree the job forks, wherever it goes (setsid, double forks). "
        "Work handed to a server outside the tree is not stopped nor charged: a tmux or screen "
        "server already running, a container started through docker's daemon, systemd-run, a "
        "job submitted to Slurm or to a remote host."},
       {{"spendcap run --team demo --experiment quickstart --rate 36 --budget 0.10 -- python3 "
         "train.py",
         "Run a job at $36 an hour with a budget of 10 cents, charged to team demo."},
        {"spendcap run --team vision --gpu a100-80gb --gpus 8 --job-key vit-l --budget 400 \\\n"
         "    --grace 2m -- python3 train.py --resume",
         "Price the run by the policy's A100 rate; every restart with job key vit-l spends from "
         "the one $400, and the job gets two minutes to checkpoint when it trips."},
        {"spendcap run --rate 36 --budget 5 --stall-after 10m --require-fit -- python3 train.py",
         "Stop the run (123) after 10 minutes without a progress line, or as soon as its "
         "projected total exceeds $5."},
        {"spendcap run --dry-run -- python3 train.py",
         "In a project with a spendcap.json: show the terms it gives, where each came from, and "
         "whether the run would be admitted, without starting it."},
        {"spendcap run --mode warn --team vision --rate 36 --budget 5 -- ./train.sh",
         "Stop nothing: say and record when the run would have been stopped."},
        {"exec spendcap run --job-key \"vit-$SLURM_JOB_ID\" --gpu a100-80gb --budget 400 \\\n"
         "    -- python3 train.py",
         "In a Slurm batch script: spendcap gets Slurm's signals, a SIGTERM ends the run as "
         "preempted and the requeued job continues the same budget."}},
       {"spendcap run exits with the command's own status when the command ended by itself, and "
        "with one of the codes below when spendcap refused or stopped it; --status-file tells a "
        "command that itself exits 124 from a budget stop."},
       {"spendcap-ps(1)", "spendcap-runs(1)", "spendcap-show(1)", "spendcap-stop(1)",
        "spendcap-estimate(1)", "spendcap-policy(5)"}},
      {"ps",
       "[--json] [--ledger URL]",
       {"Lists the ledger's running and lost runs, one row each: the user, host, team and "
        "experiment, the status (running, paused for a job stopped by Ctrl-Z, lost), the live "
        "spend, what the ledger holds for the run (HELD: its ceiling) and the binding budget's "
        "used share (spend / budget, as budgets says it). A running run shows the most it can "
        "have spent (its rate since admission, at least its last heartbeat's, at most its "
        "ceiling), so its spend never goes down. A run whose heartbeat "
        "stopped is lost: it keeps its ceiling and, once it can no longer be spending, is charged "
        "exactly that, until its spooled final row replaces the charge: ps replays this host's "
        "spool and queues lost runs' events (report, runs, show and budgets only read).",
        "STEP is the progress channel's last step of its total (1200/2000) and ETA the time its "
        "steps still need at their recent pace (~3m10s), as the run's last heartbeat recorded it "
        "in the ledger; - when not known. On a terminal (or with $COLUMNS) the table fits its "
        "width: long names, statuses and budgets are cut, ending in ~; through a pipe every cell "
        "is whole.",
        "A multi-node run (--run-id) is one row with its nodes under it; --json keeps a row per "
        "node, with job_key and node. --json gives its times (started_at, heartbeat_at, "
        "finished_at, eta_at) as RFC 3339 UTC strings, as runs and show do, and each run's step, "
        "total_steps, eta_seconds and eta_at (null when not known). Run ids are shown as the "
        "shortest unique prefix (at least 8 characters), which show, stop --run and accept "
        "take."},
       {{"spendcap ps", "What is running now, and what it has spent."},
        {"spendcap ps --json", "The same for a script: one object per run (per node)."}},
       {},
       {"spendcap-runs(1)", "spendcap-show(1)", "spendcap-stop(1)"}},
      {"runs",
       "[--since DATE] [--until DATE] [--team T] [--experiment E] [--user U] [--status S] "
       "[--limit N] [--format table|csv|json]",
       {"The run history, newest first, as sacct shows it: finished and running runs, one row "
        "each, with the user, team, experiment, status, stop reason, exit codes (EXIT: spendcap's, "
        "124 for a budget trip; CMD EXIT: the command's own), start, duration, "
        "spend and budget (and where the budget came from when it is not the run's own). --since "
        "and --until take a date (2026-12-01; --until includes that day), a UTC "
        "time (2026-12-01T10:00:00Z) or a time ago (30d). The filters run in the ledger's own "
        "query; --limit keeps the newest (50 by default) and says when there were more.",
        "Statuses: running, succeeded, failed, killed, refused, lost, preempted. --format csv "
        "writes plain numbers with every cell quoted as report's csv is; --json (or --format "
        "json) the same fields as objects."},
       {{"spendcap runs --since 7d --team vision", "Team vision's runs of the last seven days."},
        {"spendcap runs --status killed --limit 20", "The last 20 runs spendcap stopped."},
        {"spendcap runs --format csv > runs.csv", "The history for a spreadsheet."}},
       {},
       {"spendcap-ps(1)", "spendcap-show(1)", "spendcap-report(1)"}},
      {"show",
       "[--json] RUN_ID",
       {"Prints one run's whole record as labelled lines: user and uid, team, experiment, "
        "project, tags, job, host and pid, start, end, duration, exit code (spendcap's) and the "
        "command's exit, stop reason, spend at "
        "its rate, mode, budget and where it came from, pricing, ceiling, overrun, and the GPU "
        "figures (time allocated, measured and busy, idle spend, energy, a sparkline of "
        "utilisation and power per minute). --json gives the same as one object, times in ISO "
        "8601 UTC. RUN_ID is the run's UUID or any prefix of it no other run shares (runs and ps "
        "print the shortest such prefix)."},
       {{"spendcap show 3f2a9c1e", "The run whose id starts with 3f2a9c1e."},
        {"spendcap show --json 3f2a9c1e", "The same record for a script."}},
       {"125 when no run, or more than one, has an id starting with RUN_ID (the candidates are "
        "listed)."},
       {"spendcap-runs(1)", "spendcap-ps(1)"}},
      {"report",
       "[--by KEY]... [--since DATE] [--until DATE] [--team T] [--experiment E] [--format FORMAT]",
       {"Showback: groups the ledger's runs by team, experiment, project, user, host, UTC day or "
        "a tag (--by, repeatable) and prints per group the runs and how they ended, the spend, "
        "the waste (the spend of runs that did not succeed: failed, killed, lost, preempted; of a "
        "run stopped after its job wrote its checkpoint, only the spend after it) and its share, "
        "and where runs measured them GPU-hours allocated and busy, utilisation, idle spend, "
        "energy, CO2, cost per thousand units, egress and storage. A figure no run measured is "
        "listed under \"not measured\", never shown as 0. A run belongs to the period it started "
        "in; a running run counts with its spend so far, marked *. On a terminal the table fits "
        "its width (names too long are cut to name~); through a pipe or into a file every name "
        "is printed whole.",
        "--format csv and json carry the same numbers for tools; every csv cell that a "
        "spreadsheet would evaluate as a formula gets a leading quote (--csv-raw: cells as "
        "stored). --format focus writes FinOps FOCUS 1.2 CSV, one row per charge of a run and "
        "UTC day; --format html a self-contained page with spend per day and budget against "
        "actual per team. With a metric baseline (the experiment budget's metric, "
        "baseline_metric and metric_goal, or --baseline) the report gives the cost per metric "
        "point; with accepted results (spendcap accept), the spend per accepted result."},
       {{"spendcap report --by team --by experiment --since 2026-11-01 --until 2026-11-30",
         "November's spend per team and experiment."},
        {"spendcap report --by tag:sweep --experiment resnet --format csv",
         "One experiment's sweep, by the sweep tag, as csv."},
        {"spendcap report --format focus --since 30d > focus.csv",
         "The last 30 days as FOCUS rows for the finance team's tools."}},
       {},
       {"spendcap-runs(1)", "spendcap-accept(1)", "spendcap-estimate(1)"}},
      {"estimate",
       "[OPTIONS]",
       {"Prints what a run will cost before it starts, from what is known: time per step and "
        "steps (--step-time, --steps), GPU-hours of work (--gpu-hours), or model size and "
        "tokens (--params, --tokens: about 6ND FLOPs at --mfu of the GPU's peak). Prices come "
        "from --rate or the policy (--gpu, --gpus, --instance, --instances, --pricing). It "
        "also compares spot with redone work against on-demand (--interruptions-per-100h, "
        "--lost-per-interruption), reserved against on-demand (--reserved, --on-demand), the "
        "cost per prediction of a serving process (--serving), and every GPU type of the "
        "policy whose memory holds the training state (--compare).",
        "With --team or --experiment the estimate is checked against each budget's remaining "
        "amount, so a script can gate a launch; spendcap run --estimate-steps does the same "
        "check when the run starts. Counts take k, M and B (--steps 50k, --params 7B)."},
       {{"spendcap estimate --rate 2.50 --step-time 0.8s --steps 50000",
         "11.111 hours of wall time, $27.78."},
        {"spendcap estimate --gpu h100 --gpus 8 --gpu-hours 2000 --team vision",
         "2,000 GPU-hours on eight H100s, checked against team vision's remaining budget."},
        {"spendcap estimate --compare --params 7e9 --tokens 1e12",
         "Every GPU type of the policy that can hold a 7B model's training state, cheapest "
         "first."}},
       {"0 when the estimate fits every budget asked about (or none was), 120 when it does not."},
       {"spendcap-run(1)", "spendcap-report(1)"}},
      {"stop",
       "(--team T | --experiment E | --project P | --user U | --run ID | --job KEY) "
       "[--reason TEXT] [--clear] | --list",
       {"The kill switch: writes a stop order for a scope. Every running run in the scope stops "
        "at its next heartbeat (within one --sync, exit 123, also in warn mode), and new runs in "
        "the scope are refused (120) until the order is cleared with --clear. --list shows the "
        "active orders. --run takes any unique prefix of a running run's id.",
        "The ledger checks who may: a run may be stopped by its own user, by the ledger's owner, "
        "and by a member of its team who is in every member list of the run's team, experiment "
        "and project budgets (a team is open to everyone unless its budget names members). An "
        "order by scope also speaks for the scope's later runs: --user NAME only by NAME, --team "
        "by its members, --experiment and --project by the members their budget names, else by "
        "the ledger's owner. An order is cleared by whoever placed it, the ledger's owner, and "
        "whoever the scope names."},
       {{"spendcap stop --team vision --reason \"over the month's forecast\"",
         "Stop every run of team vision and refuse new ones until the order is cleared."},
        {"spendcap stop --run 3f2a9c1e", "Stop one run."},
        {"spendcap stop --clear --team vision", "Clear the team's stop orders."},
        {"spendcap stop --list", "The active stop orders."}},
       {"125 when the caller may not stop a run the order reaches (the refusal names them), or "
        "when --run matches no running run or several; no order is placed then."},
       {"spendcap-ps(1)", "spendcap-run(1)"}},
      {"budgets",
       "[--json] [--ledger URL]",
       {"Lists each budget of the ledger: its scope and period, the amount, what finished runs "
        "used, what running and lost runs hold (their ceilings), what is available to new runs, "
        "and its members. On a personal ledger, loading a policy applies its budgets; on a "
        "shared one only the ledger's owner changes them, with budgets apply POLICY."},
       {{"spendcap budgets", "Each budget: used, held, available."},
        {"spendcap budgets apply /etc/spendcap/policy.json",
         "Set the shared ledger's budgets from the runner's policy (the ledger's owner)."}},
       {"125 when budgets apply is run by anyone but the ledger's owner."},
       {"spendcap-policy(5)", "spendcap-stop(1)"}},
      {"accept",
       "RUN_ID [--note TEXT]",
       {"Marks a finished run's result as the one kept; report then gives each group's whole "
        "spend (every failed try and sweep member included) per accepted result. A run may be "
        "accepted by its own user, the ledger's owner, and a member the team's budget names."},
       {{"spendcap accept 3f2a9c1e --note \"best val_acc, shipped\"",
         "Keep run 3f2a9c1e's result."}},
       {},
       {"spendcap-report(1)"}},
      {"policy",
       "",
       {"policy check validates policy files: one line per error, each naming its JSON path and "
        "what is wrong, and exit 125 when there is any; keys that are accepted but have no "
        "effect yet are named as warnings. policy keys lists every key, the run flag that sets "
        "it, and whether it acts yet. The file format is spendcap-policy(5)."},
       {{"spendcap policy check spendcap.json", "Check a policy before using it."},
        {"spendcap policy keys", "Every key and the flag that sets it."}},
       {},
       {"spendcap-policy(5)", "spendcap-budgets(1)"}},
      {"ledger",
       "",
       {"ledger copy copies the budgets, every run and the active stop orders of one ledger into "
        "a new, empty one, in either direction between SQLite and PostgreSQL; every total is "
        "unchanged. It refuses while runs are unfinished in the source, or when the target "
        "already has runs."},
       {{"spendcap ledger copy sqlite:/var/lib/spendcap/ledger.db \\\n"
         "    'postgresql://lab_owner@db.lab/spendcap'",
         "Move a host's ledger to PostgreSQL for many hosts."}},
       {},
       {"spendcap-budgets(1)"}},
      {"outbox",
       "",
       {"Webhook events that could not be delivered are kept in the ledger's outbox, named by "
        "their destination's variable (env:TEAM_HOOK) or file, never by the URL. outbox list "
        "shows your entries (root's shows every user's, each with its user); outbox flush sends "
        "those whose webhook variables are set in this "
        "environment and removes each one delivered. The start of every run tries the same, on "
        "its notifier's thread."},
       {{"spendcap outbox list", "Your undelivered events."},
        {"TEAM_HOOK=https://hooks.example.com/spendcap spendcap outbox flush", "Send them now."}},
       {},
       {"spendcap-notify(1)"}},
      {"notify",
       "",
       {"notify test sends a test event to every configured webhook (the policy's, and those "
        "given with --webhook-env and --webhook) and prints each one's result, signed as a run's "
        "events are."},
       {{"spendcap notify test --webhook-env TEAM_HOOK",
         "Check that the URL in $TEAM_HOOK receives spendcap's events."}},
       {},
       {"spendcap-outbox(1)", "spendcap-policy(5)"}},
      {"help",
       "[--man] [--options] [PAGE] | --man-dir DIR | --completion",
       {"Prints a page of this manual: the overview without PAGE, a verb's page (spendcap help "
        "run), or the policy file's (spendcap help policy-file). --man prints the page as roff "
        "for man(1); --options lists the options the parser accepts for the page's verb, one a "
        "line; --man-dir writes every page into DIR as the build does; --completion prints the "
        "bash completion script, written from the parser's own verbs and flags (the one installed "
        "as share/bash-completion/completions/spendcap)."},
       {{"spendcap help run", "The page of spendcap run."},
        {"spendcap help --man run | man -l -", "The same page through man(1)."}},
       {},
       {"spendcap(1)"}},
  };
  return texts;
}

const VerbText* find_verb_text(std::string_view verb) {
  for (const VerbText& text : verb_texts()) {
    if (text.verb == verb) return &text;
  }
  return nullptr;
}

const std::vector<OptionGroup>& run_option_groups() {
  static const std::vector<OptionGroup> groups = {
      {"Budget and price",
       {"--budget", "--rate", "--gpu", "--gpus", "--instance", "--instances", "--pricing",
        "--billing", "--mode", "--claim-horizon", "--estimate-steps", "--step-time"}},
      {"Identity", {"--team", "--experiment", "--project", "--tag", "--job-key", "--run-id"}},
      {"Stopping",
       {"--checkpoint-signal", "--grace", "--exit-window", "--kill-after", "--forward",
        "--spot-notice", "--spot-notice-url"}},
      {"Guards", {"--stall-after", "--require-fit", "--retry-backoff", "--clear-crash-loop"}},
      {"Output",
       {"--quiet", "--verbose", "--title", "--log", "--status-file", "--metrics-dir", "--dry-run"}},
      {"Isolation", {"--isolation"}},
      {"Ledger and policy", {"--policy", "--ledger", "--interval", "--sync"}},
      {"Webhooks", {"--webhook-env", "--webhook"}},
      {"Storage", {"--checkpoint-dir", "--checkpoint-max-gb"}},
  };
  return groups;
}

const std::vector<EnvironmentVariable>& environment_variables() {
  static const std::vector<std::string> ledger_verbs = {
      "run", "ps", "runs", "show", "report", "estimate", "stop", "budgets", "accept", "outbox"};
  static const std::vector<EnvironmentVariable> variables = {
      {"SPENDCAP_POLICY",
       "the policy file when --policy is not given (second in the search order); a missing file "
       "is an error",
       false,
       {"run", "ps", "runs", "show", "report", "estimate", "stop", "budgets", "accept", "outbox",
        "notify"}},
      {"SPENDCAP_TEAM",
       "with SPENDCAP_EXPERIMENT and SPENDCAP_PROJECT, the run's names when the flags are not "
       "given (before the policy's defaults.team, ...); a run's job gets them, so a run inside it "
       "is charged alike",
       false,
       {"run"}},
      {"SPENDCAP_RATE",
       "the burn rate in USD per hour when no --rate, --gpu or --instance is given "
       "(SPENDCAP_GPU: the GPU type instead)",
       false,
       {"run"}},
      {"SPENDCAP_BUDGET",
       "the run budget when --budget is not given (before the policy's defaults.budget); "
       "SPENDCAP_GRACE likewise for --grace",
       false,
       {"run"}},
      {"XDG_CONFIG_HOME", "the user's policy is $XDG_CONFIG_HOME/spendcap/policy.json", false, {}},
      {"XDG_DATA_HOME", "the default ledger is $XDG_DATA_HOME/spendcap/ledger.db", false,
       ledger_verbs},
      {"XDG_STATE_HOME",
       "final rows the ledger did not take are spooled in $XDG_STATE_HOME/spendcap/spool",
       false,
       {"run"}},
      {"XDG_RUNTIME_DIR",
       "a final row that cannot be spooled there (a full filesystem) goes to "
       "$XDG_RUNTIME_DIR/spendcap/spool, replayed the same way",
       false,
       {"run"}},
      {"HOME", "the XDG directories' base when they are unset or not absolute", false, {}},
      {"SPENDCAP_SPOOL_DIR",
       "the spool directory instead (refused by a setgid install and the shared runner)",
       false,
       {"run"}},
      {"SPENDCAP_NVML_LIBRARY",
       "the NVML library to load instead of libnvidia-ml.so.1; none turns GPU measurement off "
       "(refused when setgid)",
       false,
       {"run"}},
      {"SPENDCAP_SPOT_METADATA_URL",
       "the metadata server --spot-notice aws|gcp polls (default http://169.254.169.254)",
       false,
       {"run"}},
      {"SPENDCAP_TEST_SWITCHES",
       "the test suite's switches that turn protections off (negative controls); honoured on a "
       "personal ledger only, refused under a locked policy, as is every SPENDCAP_TEST_* variable",
       false,
       {}},
      {"CUDA_VISIBLE_DEVICES",
       "the GPUs of the run: their count is the default of --gpus, and they are the devices "
       "measured (indices, UUIDs, UUID prefixes or MIG UUIDs)",
       false,
       {"run"}},
      {"CUDA_DEVICE_ORDER",
       "PCI_BUS_ID makes a CUDA index NVML's index; otherwise an index is resolved only on one "
       "GPU or identical GPUs",
       false,
       {"run"}},
      {"SLURM_GPUS_ON_NODE",
       "under Slurm, the default of --gpus (with SLURM_JOB_GPUS and SLURM_STEP_GPUS, the devices "
       "measured)",
       false,
       {"run"}},
      {"SLURM_JOB_ID",
       "with SLURM_STEP_ID, the id --run-id slurm takes (slurm-JOBID.STEPID); SLURMD_NODENAME "
       "names the node. These, SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID, SLURM_JOB_NAME, "
       "SLURM_JOB_PARTITION, SLURM_JOB_ACCOUNT and SLURM_CLUSTER_NAME become the run's tags",
       false,
       {"run"}},
      {"POD_NAME",
       "with POD_NAMESPACE and NODE_NAME (Kubernetes' Downward API), the tags k8s_pod, "
       "k8s_namespace and k8s_node",
       false,
       {"run"}},
      {"PGPASSWORD",
       "read by libpq for a postgresql:// ledger, as are PGPASSFILE, PGSERVICEFILE and libpq's "
       "other variables (~/.pgpass by default)",
       false, ledger_verbs},
      {"COLUMNS",
       "the width report's table fits when stdout is not a terminal (unset: no width)",
       false,
       {"report"}},
      {"SPENDCAP_SHARED_RUNNER",
       "1 in the environment of apt-get install or dpkg -i makes the Debian package set up the "
       "shared-runner layout",
       false,
       {}},
      {"SPENDCAP_RUN_ID", "the run's id", true, {"run"}},
      {"SPENDCAP_TEAM", "the run's team (unset when it has none)", true, {"run"}},
      {"SPENDCAP_EXPERIMENT", "the run's experiment", true, {"run"}},
      {"SPENDCAP_PROJECT", "the run's project", true, {"run"}},
      {"SPENDCAP_BUDGET_USD", "the run's --budget", true, {"run"}},
      {"SPENDCAP_CHECKPOINT_SIGNAL", "the signal that asks the job to checkpoint", true, {"run"}},
      {"SPENDCAP_CHECKPOINT_DONE",
       "a file the job may create once its checkpoint is written: the grace then ends at once",
       true,
       {"run"}},
      {"SPENDCAP_PROGRESS",
       "a file the job may append JSON progress lines to ({\"step\":1200,\"total_steps\":50000})",
       true,
       {"run"}},
  };
  return variables;
}

}  // namespace spendcap
