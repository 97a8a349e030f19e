// The few libpq functions the PostgreSQL store uses, declared here and loaded at run time through
// DynamicLibrary (libpq.so.5), so that spendcap neither links libpq nor needs its headers: a host
// that never opens a postgresql:// ledger never loads it. The declarations follow libpq-fe.h
// (stable since libpq 5: PostgreSQL 8.x), but for pipeline mode (libpq 14), which is optional.
#pragma once

#include <string>

#include "spendcap/base/dynamic_library.hpp"

namespace spendcap::libpq {

struct PGconn;
struct PGresult;
using Oid = unsigned int;

enum ConnStatusType { CONNECTION_OK = 0, CONNECTION_BAD = 1 };
enum ExecStatusType {
  PGRES_EMPTY_QUERY = 0,
  PGRES_COMMAND_OK = 1,
  PGRES_TUPLES_OK = 2,
  PGRES_FATAL_ERROR = 7,
  PGRES_PIPELINE_SYNC = 10,
  PGRES_PIPELINE_ABORTED = 11,
};
constexpr int PG_DIAG_SQLSTATE = 'C';

struct Api {
  PGconn* (*connectdb_params)(const char* const* keywords, const char* const* values,
                              int expand_dbname);
  ConnStatusType (*status)(const PGconn* conn);
  char* (*error_message)(const PGconn* conn);
  void (*finish)(PGconn* conn);
  void (*reset)(PGconn* conn);
  PGresult* (*exec_params)(PGconn* conn, const char* command, int n_params, const Oid* param_types,
                           const char* const* param_values, const int* param_lengths,
                           const int* param_formats, int result_format);
  ExecStatusType (*result_status)(const PGresult* result);
  char* (*result_error_field)(const PGresult* result, int field_code);
  char* (*result_error_message)(const PGresult* result);
  int (*ntuples)(const PGresult* result);
  char* (*getvalue)(const PGresult* result, int row, int column);
  int (*getisnull)(const PGresult* result, int row, int column);
  char* (*cmd_tuples)(PGresult* result);
  void (*clear)(PGresult* result);
  PGresult* (*exec)(PGconn* conn, const char* query);  // a script: several statements, no params
  using NoticeProcessor = void (*)(void* arg, const char* message);
  NoticeProcessor (*set_notice_processor)(PGconn* conn, NoticeProcessor processor, void* arg);
  // Sending without waiting, and reading what was sent.
  int (*send_query_params)(PGconn* conn, const char* command, int n_params, const Oid* param_types,
                           const char* const* param_values, const int* param_lengths,
                           const int* param_formats, int result_format);
  PGresult* (*get_result)(PGconn* conn);
  // Pipeline mode (libpq 14): several statements in one round trip. nullptr with an older libpq.
  int (*enter_pipeline_mode)(PGconn* conn);
  int (*exit_pipeline_mode)(PGconn* conn);
  int (*pipeline_sync)(PGconn* conn);
};

// libpq, loaded on first use (thread-safe); throws Error naming libpq when it cannot be loaded or
// lacks one of these functions.
const Api& api();

}  // namespace spendcap::libpq
