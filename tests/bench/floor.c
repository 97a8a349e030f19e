/* The floor of one supervised run (issue 41): the least a program can do and still give a short
 * run spendcap's guarantees, written as plainly as C allows, so that `spendcap run -- true` can be
 * measured against it beside `timeout 100 true` (overhead_bench.py's `floor` variant).
 *
 *   floor LEDGER.db CGROUP_PARENT CMD [ARGS...]
 *
 * What it does, in order: opens LEDGER.db as a SQLite WAL ledger (synchronous=NORMAL, the WAL
 * kept and not checkpointed at close, as spendcap's) and commits an admission row (command, start
 * time, a ceiling) before the job exists; makes a fresh cgroup under CGROUP_PARENT (a writable
 * cgroup v2 directory: root); forks a guard, which clones the job straight into that cgroup and
 * into a new PID namespace (clone3 with CLONE_INTO_CGROUP | CLONE_NEWPID), the job then execs CMD;
 * the guard waits for it and exits with its status; the program waits for the guard, removes the
 * cgroup and commits the final row (end, status, spend). No options, no policy, no budgets, no
 * threads.
 *
 * Written for this project from the description of ../shared/tools/floor.c (issue 41); it links
 * the SQLite spendcap links (spendcap_sqlite3), so the comparison is not one of two SQLite builds.
 * It compiles as C and as C++ (CMake builds it with the project's C++ compiler). Exit status: the
 * command's (128+N for a signal N), 125 when the floor itself fails. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void fail(const char* what) {
  perror(what);
  _exit(125);
}

static double wall_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* One statement run to completion; any failure ends the floor (125). */
static void step_once(sqlite3* db, sqlite3_stmt* statement, const char* what) {
  if (sqlite3_step(statement) != SQLITE_DONE) {
    fprintf(stderr, "floor: %s: %s\n", what, sqlite3_errmsg(db));
    _exit(125);
  }
  sqlite3_finalize(statement);
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: floor LEDGER.db CGROUP_PARENT CMD [ARGS...]\n");
    return 125;
  }
  const char* ledger = argv[1];
  const char* cgroup_parent = argv[2];
  char** command = argv + 3;

  sqlite3* db = NULL;
  if (sqlite3_open(ledger, &db) != SQLITE_OK) fail("sqlite3_open");
  sqlite3_busy_timeout(db, 10000);
  /* As spendcap's ledger: the WAL is kept and not checkpointed when the last connection closes.
   * A checkpoint at every close (SQLite's default) costs four fdatasyncs, about 15 ms here, and
   * no guarantee needs it: at synchronous=NORMAL a commit in WAL mode survives the process. */
  int persist_wal = 1;
  sqlite3_file_control(db, "main", SQLITE_FCNTL_PERSIST_WAL, &persist_wal);
  sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
  if (sqlite3_exec(db,
                   "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                   "CREATE TABLE IF NOT EXISTS runs(id INTEGER PRIMARY KEY, command TEXT,"
                   " started_at REAL, ended_at REAL, status TEXT, spend REAL, ceiling REAL)",
                   NULL, NULL, NULL) != SQLITE_OK) {
    fprintf(stderr, "floor: %s: %s\n", ledger, sqlite3_errmsg(db));
    return 125;
  }
  double started_s = wall_s();
  sqlite3_stmt* statement = NULL;
  sqlite3_prepare_v2(db,
                     "INSERT INTO runs(command, started_at, status, ceiling)"
                     " VALUES(?, ?, 'running', ?)",
                     -1, &statement, NULL);
  sqlite3_bind_text(statement, 1, command[0], -1, SQLITE_STATIC);
  sqlite3_bind_double(statement, 2, started_s);
  sqlite3_bind_double(statement, 3, 1.0);
  step_once(db, statement, "admission row");
  sqlite3_int64 run_id = sqlite3_last_insert_rowid(db);

  char cgroup[4096];
  snprintf(cgroup, sizeof cgroup, "%s/floor-%d", cgroup_parent, (int)getpid());
  if (mkdir(cgroup, 0755) != 0) fail(cgroup);
  int cgroup_fd = open(cgroup, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (cgroup_fd < 0) fail(cgroup);

  pid_t guard = fork();
  if (guard < 0) fail("fork");
  if (guard == 0) {
    struct clone_args args;
    memset(&args, 0, sizeof args);
    args.flags = CLONE_INTO_CGROUP | CLONE_NEWPID;
    args.exit_signal = SIGCHLD;
    args.cgroup = (uint64_t)cgroup_fd;
    long job = syscall(SYS_clone3, &args, sizeof args);
    if (job < 0) fail("clone3");
    if (job == 0) {
      execvp(command[0], command);
      _exit(127);
    }
    int job_status = 0;
    if (waitpid((pid_t)job, &job_status, 0) < 0) fail("waitpid job");
    _exit(WIFEXITED(job_status) ? WEXITSTATUS(job_status) : 128 + WTERMSIG(job_status));
  }
  int guard_status = 0;
  if (waitpid(guard, &guard_status, 0) < 0) fail("waitpid guard");
  close(cgroup_fd);
  if (rmdir(cgroup) != 0) fail(cgroup);
  int exit_code = WIFEXITED(guard_status) ? WEXITSTATUS(guard_status) : 125;

  double ended_s = wall_s();
  sqlite3_prepare_v2(db, "UPDATE runs SET ended_at = ?, status = ?, spend = ? WHERE id = ?", -1,
                     &statement, NULL);
  sqlite3_bind_double(statement, 1, ended_s);
  sqlite3_bind_text(statement, 2, exit_code == 0 ? "succeeded" : "failed", -1, SQLITE_STATIC);
  sqlite3_bind_double(statement, 3, ended_s - started_s);
  sqlite3_bind_int64(statement, 4, run_id);
  step_once(db, statement, "final row");
  sqlite3_close(db);
  return exit_code;
}
