#!/bin/sh
# Installs spendcap for a shared runner whose users cannot rewrite the ledger (README, "Shared
# runner"). Idempotent; run as root:
#
#   scripts/install-shared-runner.sh [--binary BUILT] [--bin PATH] [--ledger-dir DIR]
#                                    [--policy-file LOCKED] [--group NAME] [POLICY]
#                                    [--metrics-dir MDIR [--metrics-reader USER]]
#
# It creates the group (default spendcap; users are NOT added to it), installs BUILT (default
# build/spendcap) as PATH (default /usr/local/bin/spendcap) root:GROUP mode 2755, creates DIR
# (default /var/lib/spendcap) root:GROUP 2770 and the ledger DIR/ledger.db root:GROUP 0660, and
# writes POLICY (default policies/shared-runner.json) as the locked LOCKED (default
# /etc/spendcap/policy.json, root 0644) with its "ledger" set to that file; then applies the locked
# budgets to the ledger. spendcap holds the group only while it opens the ledger.
# With --metrics-dir, MDIR (node_exporter's textfile directory) is made root:GROUP 2770 and the
# locked policy's "metrics_dir" names it: only spendcap's metrics writer (which keeps the group)
# writes there, files 0660. --metrics-reader USER (node_exporter's user) gets read access through
# an ACL (u:USER:rx on MDIR, default u:USER:r on its files), not through the group (the group
# writes the ledger). Needs setfacl (Debian's acl).
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
binary="$here/build/spendcap"
bin=/usr/local/bin/spendcap
ledger_dir=/var/lib/spendcap
policy_file=/etc/spendcap/policy.json
group=spendcap
policy="$here/policies/shared-runner.json"
metrics_dir=""
metrics_reader=""

while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --ledger-dir) ledger_dir=$2; shift 2 ;;
    --policy-file) policy_file=$2; shift 2 ;;
    --group) group=$2; shift 2 ;;
    --metrics-dir) metrics_dir=$2; shift 2 ;;
    --metrics-reader) metrics_reader=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    -*) echo "install-shared-runner: unknown option $1" >&2; exit 2 ;;
    *) policy=$1; shift ;;
  esac
done

if [ "$(id -u)" -ne 0 ]; then
  echo "install-shared-runner: run it as root" >&2; exit 1
fi
[ -x "$binary" ] || { echo "install-shared-runner: no built spendcap at $binary (build it first)" >&2; exit 1; }
[ -r "$policy" ] || { echo "install-shared-runner: cannot read the policy $policy" >&2; exit 1; }
command -v python3 >/dev/null || { echo "install-shared-runner: needs python3 to write the policy" >&2; exit 1; }

getent group "$group" >/dev/null || groupadd --system "$group"

# The binary: setgid, so that only its code opens the ledger with the group.
install -d -m 0755 "$(dirname "$bin")"
install -o root -g "$group" -m 2755 "$binary" "$bin.new"
mv -f "$bin.new" "$bin"
chmod 2755 "$bin"  # some filesystems clear setgid on rename; set it again

# The ledger: a directory only root and the group can enter, a file root owns.
install -d -o root -g "$group" -m 2770 "$ledger_dir"
chown root:"$group" "$ledger_dir"
chmod 2770 "$ledger_dir"
ledger="$ledger_dir/ledger.db"
[ -e "$ledger" ] || install -o root -g "$group" -m 0660 /dev/null "$ledger"
for file in "$ledger" "$ledger-wal" "$ledger-shm"; do
  [ -e "$file" ] && chown root:"$group" "$file" && chmod 0660 "$file"
done

# Metrics (issue 19): a directory only the group writes; its reader by an ACL, not the group.
if [ -n "$metrics_reader" ] && [ -z "$metrics_dir" ]; then
  echo "install-shared-runner: --metrics-reader needs --metrics-dir" >&2; exit 2
fi
if [ -n "$metrics_dir" ]; then
  install -d -o root -g "$group" -m 2770 "$metrics_dir"
  chown root:"$group" "$metrics_dir"
  chmod 2770 "$metrics_dir"
  if [ -n "$metrics_reader" ]; then
    command -v setfacl >/dev/null || { echo "install-shared-runner: --metrics-reader needs setfacl (apt-get install acl)" >&2; exit 1; }
    id -u "$metrics_reader" >/dev/null 2>&1 || { echo "install-shared-runner: no user $metrics_reader" >&2; exit 1; }
    setfacl -m "u:$metrics_reader:rx" "$metrics_dir"
    setfacl -d -m "u:$metrics_reader:r" "$metrics_dir"
    # Files already there (an earlier install) get it too.
    find "$metrics_dir" -maxdepth 1 -type f -exec setfacl -m "u:$metrics_reader:r" {} +
  fi
fi

# The locked policy, naming that ledger; root-owned 0644 in a directory only root writes.
install -d -o root -g root -m 0755 "$(dirname "$policy_file")"
python3 - "$policy" "$ledger" "$policy_file.new" "$metrics_dir" <<'PY'
import json, sys
source, ledger, out, metrics_dir = sys.argv[1:]
with open(source) as f:
    policy = json.load(f)
policy["locked"] = True
policy["ledger"] = "sqlite:" + ledger
if metrics_dir:
    policy["metrics_dir"] = metrics_dir
with open(out, "w") as f:
    json.dump(policy, f, indent=2)
    f.write("\n")
PY
chown root:root "$policy_file.new"
chmod 0644 "$policy_file.new"
mv -f "$policy_file.new" "$policy_file"

# Creates the schema as root (the -wal and -shm files too) and sets the budgets the policy locks.
(cd / && "$bin" budgets apply "$policy_file")
for file in "$ledger" "$ledger-wal" "$ledger-shm"; do
  [ -e "$file" ] && chown root:"$group" "$file" && chmod 0660 "$file"
done
echo "installed $bin (setgid $group), ledger $ledger, locked policy $policy_file"
