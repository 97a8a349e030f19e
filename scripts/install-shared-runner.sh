#!/bin/sh
# Installs spendcap for a shared runner whose users do not trust each other (README, "Installing a
# shared runner" and "Threat model"). Idempotent; run as root:
#
#   scripts/install-shared-runner.sh [--binary BUILT] [--runner-binary BUILT_RUNNER] [--bin PATH]
#       [--runner PATH]
#       [--ledger-dir DIR | --ledger postgresql://[OWNER@]HOST/DB [--password-file FILE]]
#       [--policy-file LOCKED] [--group NAME] [--user NAME] [--setgid-only]
#       [--metrics-dir MDIR [--metrics-reader USER]] [--spool-dir SDIR]
#       [--man-dir MANDIR | --no-man-pages] [POLICY]
#
# It creates the group (default spendcap; users are NOT added to it) and the service user (default
# spendcap, in that group, no login), installs BUILT (default build/spendcap) as the front PATH
# (default /usr/local/bin/spendcap, root 0755: what users run, and what the runner execs as the
# supervisor) and BUILT_RUNNER (default spendcap-runner beside BUILT; its own small program) as the
# runner PATH (default /usr/local/lib/spendcap/spendcap-runner, setuid root, root:GROUP 4755: the
# one setuid file), and names them in /etc/spendcap/runner.json (root 0644). Runs then have their
# supervisor and guard under the service user, out of the users' reach, and the job as the user
# (shared_runner/entry.hpp).
# It creates DIR (default /var/lib/spendcap) root:GROUP 2770 and the ledger DIR/ledger.db
# root:GROUP 0660, writes POLICY (default policies/shared-runner.json) as the locked LOCKED
# (default /etc/spendcap/policy.json, root 0644) with its "ledger" set to that file, and applies
# the locked budgets to the ledger. The ledger's side files (DIR/ledger.db-wal, -shm) are made
# with it, root:GROUP 0660, so that no run's process creates them (SQLite keeps them).
# SDIR (default DIR/spool) is the runner's spool of final rows the ledger did not take, root:GROUP
# 2770: only the runner's processes write and replay it, no user reaches a file in it (runner.json
# names it).
# With --ledger postgresql://..., the ledger is that PostgreSQL database instead: the supervisor
# connects as the service user, with the password in FILE (default /etc/spendcap/ledger.password,
# root:GROUP 0640, one line; kept across installs, and taken over from the older
# /etc/spendcap/ledger.pgpass). The locked policy names the URL without OWNER and FILE as its
# "ledger_password_file": the supervisor reads it with the runner's group (its filesystem uid is
# the caller's, so a passfile of the service user's own would be closed to it) and hands it to
# libpq in memory; users' own commands (ps, stop, budgets, report) log in as their own roles with
# their own ~/.pgpass or PGPASSWORD. --passfile is the older name of --password-file. With OWNER in
# the URL, the budgets are applied as OWNER (which creates the schema and the spendcap_runner
# role); the script then prints the SQL that creates the service user's login role, for the
# database's administrator to run.
# Webhook files (url_file, secret_file) the policy names are made root:GROUP 0640 when they exist;
# a missing one is named, with the command that creates it (the group exists from here on).
# A --ledger URL may name a standby too, as a libpq host list kept as written (a failover:
# postgresql://OWNER@db1:5432,db2:5432/DB?target_session_attrs=read-write).
# With --metrics-dir, MDIR (node_exporter's textfile directory) is made root:GROUP 2770 and the
# locked policy's "metrics_dir" names it: only spendcap's metrics writer (which keeps the group)
# writes there, files 0660. --metrics-reader USER (node_exporter's user) gets read access through
# an ACL (u:USER:rx on MDIR, default u:USER:r on its files), not through the group (the group
# writes the ledger). Needs setfacl (Debian's acl).
#
# The man pages go into MANDIR/man1 and MANDIR/man5 (default /usr/local/share/man), gzip'd, written
# by BUILT itself; --no-man-pages leaves them out (the Debian package ships its own).
#
# Reinstalling (an upgrade, the package's postinst) keeps what the install in place holds: without
# POLICY, the locked policy LOCKED as it is (not policies/shared-runner.json); without --ledger and
# --ledger-dir, the ledger LOCKED names (its SQLite file, or its PostgreSQL URL and passfile), so an
# upgrade never swaps a ledger for a fresh empty one. Whatever it does change in LOCKED is printed
# as a diff.
#
# --setgid-only installs the older layout instead: PATH setgid GROUP (2755), no runner. It keeps
# users from rewriting the ledger, but not from stopping their own run's enforcement (README,
# "Threat model"); the tests use it as the negative control.
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
binary="$here/build/spendcap"
runner_binary=""
bin=/usr/local/bin/spendcap
runner=/usr/local/lib/spendcap/spendcap-runner
ledger_dir=/var/lib/spendcap
policy_file=/etc/spendcap/policy.json
runner_config=/etc/spendcap/runner.json
group=spendcap
user=spendcap
setgid_only=0
policy="$here/policies/shared-runner.json"
metrics_dir=""
metrics_reader=""
pg_url=""
passfile=/etc/spendcap/ledger.password
old_passfile=/etc/spendcap/ledger.pgpass
spool_dir=""
man_dir=/usr/local/share/man
policy_given=0
ledger_given=0

while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary=$2; shift 2 ;;
    --runner-binary) runner_binary=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --runner) runner=$2; shift 2 ;;
    --ledger-dir) ledger_dir=$2; ledger_given=1; shift 2 ;;
    --policy-file) policy_file=$2; shift 2 ;;
    --group) group=$2; shift 2 ;;
    --user) user=$2; shift 2 ;;
    --setgid-only) setgid_only=1; shift ;;
    --metrics-dir) metrics_dir=$2; shift 2 ;;
    --metrics-reader) metrics_reader=$2; shift 2 ;;
    --ledger) pg_url=$2; ledger_given=1; shift 2 ;;
    --password-file|--passfile) passfile=$2; shift 2 ;;
    --spool-dir) spool_dir=$2; shift 2 ;;
    --man-dir) man_dir=$2; shift 2 ;;
    --no-man-pages) man_dir=""; shift ;;
    # The header comment above, without its "# ".
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    -*) echo "install-shared-runner: unknown option $1" >&2; exit 2 ;;
    *) policy=$1; policy_given=1; shift ;;
  esac
done

# Day 2: what the install in place keeps (an upgrade runs this again with fewer arguments).
kept_url=""
kept_password_file=""
if [ -f "$policy_file" ] && [ "$(stat -c %u "$policy_file")" = 0 ]; then
  [ "$policy_given" = 1 ] || policy=$policy_file
  if [ "$ledger_given" = 0 ]; then
    installed_ledger=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("ledger", ""))' "$policy_file") || {
      echo "install-shared-runner: cannot read the installed locked policy $policy_file (fix it, or name the ledger: --ledger-dir DIR or --ledger URL)" >&2; exit 1; }
    case "$installed_ledger" in
      sqlite:*/ledger.db) ledger_dir=$(dirname "${installed_ledger#sqlite:}") ;;
      postgresql://*|postgres://*) kept_url=$installed_ledger
        kept_password_file=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("ledger_password_file", ""))' "$policy_file") ;;
      "") ;;
      *) echo "install-shared-runner: the installed locked policy $policy_file names the ledger $installed_ledger, which this script did not make; name the ledger to keep: --ledger-dir DIR or --ledger URL" >&2; exit 1 ;;
    esac
  fi
fi
if [ -e "$policy_file" ] && [ "$(stat -c %u "$policy_file")" != 0 ] && [ "$policy_given" = 0 ]; then
  echo "install-shared-runner: the installed locked policy $policy_file is not root's, so it is not kept; check it and name the policy to install: install-shared-runner.sh [OPTIONS] POLICY" >&2; exit 1
fi
if [ -n "$kept_url" ] && [ "$setgid_only" = 1 ]; then
  echo "install-shared-runner: the installed ledger $kept_url is PostgreSQL, which needs the privileged runner (not --setgid-only)" >&2; exit 2
fi

[ -n "$spool_dir" ] || spool_dir="$ledger_dir/spool"
case "$spool_dir" in /*) ;; *) echo "install-shared-runner: --spool-dir must be an absolute path" >&2; exit 2 ;; esac

if [ "$(id -u)" -ne 0 ]; then
  echo "install-shared-runner: run it as root" >&2; exit 1
fi
[ -x "$binary" ] || { echo "install-shared-runner: no built spendcap at $binary (build it first)" >&2; exit 1; }
[ -r "$policy" ] || { echo "install-shared-runner: cannot read the policy $policy" >&2; exit 1; }
command -v python3 >/dev/null || { echo "install-shared-runner: needs python3 to write the policy" >&2; exit 1; }
case "$runner" in /*) ;; *) echo "install-shared-runner: --runner must be an absolute path" >&2; exit 2 ;; esac
case "$bin" in /*) ;; *) echo "install-shared-runner: --bin must be an absolute path" >&2; exit 2 ;; esac
[ -n "$runner_binary" ] || runner_binary="$(dirname "$binary")/spendcap-runner"
if [ "$setgid_only" = 0 ] && [ ! -x "$runner_binary" ]; then
  echo "install-shared-runner: no built spendcap-runner at $runner_binary (build it first)" >&2; exit 1
fi
if [ -n "$pg_url" ]; then
  case "$pg_url" in postgresql://*|postgres://*) ;; *) echo "install-shared-runner: --ledger takes a postgresql:// URL (the SQLite ledger is --ledger-dir)" >&2; exit 2 ;; esac
  case "$passfile" in /*) ;; *) echo "install-shared-runner: --password-file must be an absolute path" >&2; exit 2 ;; esac
  [ "$setgid_only" = 0 ] || { echo "install-shared-runner: --ledger postgresql:// needs the privileged runner (not --setgid-only)" >&2; exit 2; }
fi

getent group "$group" >/dev/null || groupadd --system "$group"

# Installs $4 (default BUILT) as $1 with owner $2 and mode $3; a file already in place (the Debian
# package's) only gets the owner and mode. Some filesystems clear set-id bits on rename: set them
# again.
place() {
  source=${4:-$binary}
  if [ "$(readlink -f "$source")" != "$(readlink -f "$1")" ] && ! cmp -s "$source" "$1"; then
    install -d -m 0755 "$(dirname "$1")"
    install -o root -g "$2" -m "$3" "$source" "$1.new"
    mv -f "$1.new" "$1"
  fi
  chown root:"$2" "$1"
  chmod "$3" "$1"
}

install -d -o root -g root -m 0755 "$(dirname "$policy_file")" "$(dirname "$runner_config")"
if [ "$setgid_only" = 1 ]; then
  # The older layout: setgid, so that only its code opens the ledger with the group.
  place "$bin" "$group" 2755
  rm -f "$runner_config" "$runner"
else
  getent passwd "$user" >/dev/null ||
    useradd --system --no-create-home --home-dir / --shell /usr/sbin/nologin --gid "$group" "$user"
  [ "$(id -u "$user")" -ne 0 ] || { echo "install-shared-runner: the service user must not be root" >&2; exit 1; }
  place "$bin" root 0755
  place "$runner" "$group" 4755 "$runner_binary"
  # The runner's spool: root's directory of the group, nobody else's to enter.
  install -d -o root -g "$group" -m 2770 "$spool_dir"
  chown root:"$group" "$spool_dir"
  chmod 2770 "$spool_dir"
  python3 - "$runner" "$user" "$bin" "$spool_dir" "$runner_config.new" <<'PY'
import json, sys
runner, user, spendcap, spool, out = sys.argv[1:]
with open(out, "w") as f:
    json.dump({"runner": runner, "user": user, "spendcap": spendcap, "spool": spool}, f,
              indent=2)
    f.write("\n")
PY
  chown root:root "$runner_config.new"
  chmod 0644 "$runner_config.new"
  mv -f "$runner_config.new" "$runner_config"
fi

# PostgreSQL: the service user's password file (its password kept across installs), and the URL
# the locked policy names: no OWNER (each process connects as its own user), no passfile= (libpq's
# passfile would override users' own ~/.pgpass, and the supervisor could not open it).
if [ -n "$pg_url" ]; then
  install -d -o root -g root -m 0755 "$(dirname "$passfile")"
  urls=$(python3 - "$pg_url" "$passfile" "$user" "$old_passfile" <<'PY'
import os, secrets, sys, urllib.parse
url, passfile, user, old_passfile = sys.argv[1:]
parts = urllib.parse.urlsplit(url)
password = ""
try:
    with open(passfile) as f:
        for line in f:
            line = line.rstrip("\n")
            fields = line.split(":")
            if len(fields) == 5 and fields[3] == user:  # an older install's passfile line
                password = fields[4]
            elif line and ":" not in line:
                password = line
            if password:
                break
except FileNotFoundError:
    pass
if not password:
    try:
        with open(old_passfile) as f:
            for line in f:
                fields = line.rstrip("\n").split(":")
                if len(fields) == 5 and fields[3] == user:
                    password = fields[4]
    except FileNotFoundError:
        pass
if not password:
    password = secrets.token_urlsafe(24)  # no ':' nor backslash: nothing to escape anywhere
with open(passfile + ".new", "w") as f:
    f.write(password + "\n")
# The hosts as written, the owner cut off: a libpq multi-host list (h1:p1,h2:p2, for a
# standby) has no single hostname or port to rebuild it from.
netloc = parts.netloc.rpartition("@")[2]
query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
query = [(k, v) for k, v in query if k not in ("passfile", "user", "password")]
runner_url = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path,
                                      urllib.parse.urlencode(query, safe="/"), ""))
print(runner_url)
print(parts.username or "")
print(password)
PY
)
  runner_url=$(printf '%s\n' "$urls" | sed -n 1p)
  ledger_owner=$(printf '%s\n' "$urls" | sed -n 2p)
  role_password=$(printf '%s\n' "$urls" | sed -n 3p)
  chown root:"$group" "$passfile.new"
  chmod 0640 "$passfile.new"
  mv -f "$passfile.new" "$passfile"
  # The older install's passfile (the service user's, 0600): its password is taken over above.
  [ "$old_passfile" = "$passfile" ] || rm -f "$old_passfile"
fi

# The ledger: a directory only root and the group can enter, a file root owns.
if [ -z "$pg_url" ] && [ -z "$kept_url" ]; then
install -d -o root -g "$group" -m 2770 "$ledger_dir"
chown root:"$group" "$ledger_dir"
chmod 2770 "$ledger_dir"
ledger="$ledger_dir/ledger.db"
for file in "$ledger" "$ledger-wal" "$ledger-shm"; do
  [ -e "$file" ] || install -o root -g "$group" -m 0660 /dev/null "$file"
  chown root:"$group" "$file" && chmod 0660 "$file"
done
fi

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
# What it changes in an installed one is printed as a diff (on stderr: stdout is the webhook files).
if [ -n "$kept_url" ]; then ledger_location=$kept_url
elif [ -n "$pg_url" ]; then ledger_location=$runner_url
else ledger_location="sqlite:$ledger"; fi
# A kept PostgreSQL ledger keeps the password file the installed policy names.
if [ -n "$pg_url" ]; then password_file=$passfile
elif [ -n "$kept_url" ]; then password_file=$kept_password_file
else password_file=""; fi
webhook_files=$(python3 - "$policy" "$ledger_location" "$policy_file.new" "$metrics_dir" "$password_file" "$policy_file" <<'PY'
import difflib, json, os, sys
source, ledger, out, metrics_dir, password_file, installed = sys.argv[1:]
with open(source) as f:
    policy = json.load(f)
policy["locked"] = True
policy["ledger"] = ledger
policy.pop("ledger_password_file", None)
if password_file:
    policy["ledger_password_file"] = password_file
if metrics_dir:
    policy["metrics_dir"] = metrics_dir
text = json.dumps(policy, indent=2) + "\n"
if os.path.exists(installed):
    with open(installed) as f:
        before = f.read()
    diff = list(difflib.unified_diff(before.splitlines(True), text.splitlines(True),
                                     installed + " (installed)", installed + " (new)"))
    if diff:
        sys.stderr.write("install-shared-runner: the locked policy changes:\n" + "".join(diff))
with open(out, "w") as f:
    f.write(text)
for hook in policy.get("webhooks", []):
    for key in ("url_file", "secret_file"):
        if isinstance(hook.get(key), str):
            print(hook[key])
PY
)
chown root:root "$policy_file.new"
chmod 0644 "$policy_file.new"
mv -f "$policy_file.new" "$policy_file"

# The webhook files the policy names: read by the runner's group only (README, "Webhooks").
for file in $webhook_files; do
  if [ -f "$file" ]; then
    chown root:"$group" "$file"
    chmod 0640 "$file"
  else
    echo "install-shared-runner: the policy's webhook file $file does not exist yet; runs are refused until it does. Create it with the URL (or secret) on one line:" >&2
    echo "  install -o root -g $group -m 0640 /dev/null $file && editor $file" >&2
  fi
done

# The man pages, written by the binary being installed (so they describe it), gzip'd as man(1) reads.
if [ -n "$man_dir" ]; then
  case "$man_dir" in /*) ;; *) echo "install-shared-runner: --man-dir must be an absolute path" >&2; exit 2 ;; esac
  pages=$(mktemp -d)
  (cd / && "$binary" help --man-dir "$pages") || { rm -rf "$pages"; echo "install-shared-runner: $binary could not write its man pages (above)" >&2; exit 1; }
  for section in 1 5; do
    install -d -m 0755 "$man_dir/man$section"
    for page in "$pages"/*."$section"; do
      gzip -9nc "$page" > "$page.gz"
      install -o root -g root -m 0644 "$page.gz" "$man_dir/man$section/$(basename "$page").gz"
    done
  done
  rm -rf "$pages"
fi

if [ -n "$kept_url" ]; then
  : # The PostgreSQL ledger in place: its schema, roles and budgets are the owner's (budgets apply).
elif [ -z "$pg_url" ]; then
  # Creates the schema as root (the -wal and -shm files too) and sets the budgets the policy locks.
  (cd / && "$bin" budgets apply "$policy_file")
  for file in "$ledger" "$ledger-wal" "$ledger-shm"; do
    [ -e "$file" ] && chown root:"$group" "$file" && chmod 0660 "$file"
  done
elif [ -n "$ledger_owner" ]; then
  # As the owner: creates (or migrates) the schema and the spendcap_runner role, sets the budgets.
  (cd / && "$bin" budgets apply --ledger "$pg_url" "$policy_file") || {
    echo "install-shared-runner: applying the budgets as $ledger_owner failed (above)" >&2; exit 1; }
fi
if [ -n "$kept_url" ]; then
  echo "installed $bin (front) and $runner (runner, setuid root; runs as $user), ledger $kept_url (kept), locked policy $policy_file"
  echo "the budgets of a changed policy, as the ledger's owner: $bin budgets apply --ledger postgresql://OWNER@... $policy_file"
elif [ -n "$pg_url" ]; then
  [ -n "$ledger_owner" ] || echo "then, as the ledger's owner: $bin budgets apply --ledger postgresql://OWNER@... $policy_file"
  # The supervisor connects as the service user: its login role, for the administrator to create.
  echo "the PostgreSQL ledger's administrator creates the service user's login role (psql):"
  echo "  CREATE ROLE \"$user\" LOGIN PASSWORD '$role_password';"
  echo "  GRANT spendcap_runner TO \"$user\";"
  # The bound on a stopped command (README, "The ledger's lock, and the bound"): the runner's
  # processes wait at most 10 s for a row lock, and the server ends a session idle in a transaction
  # (a user's SIGSTOPped command) after a minute, releasing what it held.
  ledger_db=${pg_url##*/}; ledger_db=${ledger_db%%\?*}
  echo "  ALTER ROLE \"$user\" SET lock_timeout = '10s';"
  echo "  ALTER ROLE \"$user\" SET statement_timeout = '30s';"
  echo "  ALTER DATABASE \"$ledger_db\" SET idle_in_transaction_session_timeout = '1min';"
  echo "installed $bin (front) and $runner (runner, setuid root; runs as $user), ledger $runner_url (the service user's password in $passfile), locked policy $policy_file"
elif [ "$setgid_only" = 1 ]; then
  echo "installed $bin (setgid $group, no privileged runner), ledger $ledger, locked policy $policy_file"
else
  echo "installed $bin (front and supervisor) and $runner (runner, the one setuid-root file; runs as $user), ledger $ledger, locked policy $policy_file"
fi
