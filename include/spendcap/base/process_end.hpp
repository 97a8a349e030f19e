// How the process ends when a thread of it was abandoned inside a library (issue 33): the ledger's
// worker left stuck in libpq when a ledger call timed out (ledger/async_ledger.hpp), a webhook
// attempt left in libcurl (notify/webhook_notifier.hpp). exit() would run the libraries'
// finalisers under that thread (libkrb5's destroys the mutexes that libpq's GSSAPI code is using:
// an assertion and SIGABRT after the run had ended, seen in the fleet test), so such a process
// flushes its output and ends with _exit() instead. Nothing spendcap keeps needs a finaliser: the
// ledger's writes are committed or spooled before main returns.
#pragma once

namespace spendcap {

// A thread is left running that may be inside a library at exit. Thread-safe.
void note_abandoned_thread();
bool thread_abandoned();

// main's last step: returns `status` when no thread was abandoned (exit() then runs as usual),
// else flushes stdout, stderr and every stdio stream and ends the process with _exit(status).
int end_of_main(int status);

}  // namespace spendcap
