// Loading libpq. Contract in libpq.hpp.
#include "libpq.hpp"

#include "spendcap/base/error.hpp"

namespace spendcap::libpq {

namespace {

struct Loaded {
  DynamicLibrary library;
  Api api{};
};

template <typename Function>
void resolve(const DynamicLibrary& library, Function& function, const char* name) {
  function = library.function<Function>(name);
  if (!function) {
    throw Error("libpq " + library.path(), std::string("lacks ") + name,
                "install libpq5 (PostgreSQL 10 or newer)");
  }
}

Loaded load() {
  Loaded loaded{DynamicLibrary("libpq.so.5", "libpq (the PostgreSQL client library)")};
  const DynamicLibrary& library = loaded.library;
  Api& api = loaded.api;
  resolve(library, api.connectdb_params, "PQconnectdbParams");
  resolve(library, api.status, "PQstatus");
  resolve(library, api.error_message, "PQerrorMessage");
  resolve(library, api.finish, "PQfinish");
  resolve(library, api.reset, "PQreset");
  resolve(library, api.exec_params, "PQexecParams");
  resolve(library, api.result_status, "PQresultStatus");
  resolve(library, api.result_error_field, "PQresultErrorField");
  resolve(library, api.result_error_message, "PQresultErrorMessage");
  resolve(library, api.ntuples, "PQntuples");
  resolve(library, api.getvalue, "PQgetvalue");
  resolve(library, api.getisnull, "PQgetisnull");
  resolve(library, api.cmd_tuples, "PQcmdTuples");
  resolve(library, api.clear, "PQclear");
  resolve(library, api.exec, "PQexec");
  resolve(library, api.set_notice_processor, "PQsetNoticeProcessor");
  resolve(library, api.send_query_params, "PQsendQueryParams");
  resolve(library, api.get_result, "PQgetResult");
  // Optional: without them, a transaction's BEGIN is its own round trip.
  api.enter_pipeline_mode =
      library.function<decltype(api.enter_pipeline_mode)>("PQenterPipelineMode");
  api.exit_pipeline_mode = library.function<decltype(api.exit_pipeline_mode)>("PQexitPipelineMode");
  api.pipeline_sync = library.function<decltype(api.pipeline_sync)>("PQpipelineSync");
  if (!api.enter_pipeline_mode || !api.exit_pipeline_mode || !api.pipeline_sync) {
    api.enter_pipeline_mode = nullptr;
  }
  return loaded;
}

}  // namespace

const Api& api() {
  // Never unloaded: the async ledger's worker is detached when it is stuck retrying an unreachable
  // server (async_ledger.cpp), and it may still be inside libpq when the process exits. A static
  // object's destructor would dlclose libpq under it (a SIGSEGV in exit, seen once with the server
  // halted); the kernel reclaims the mapping at exit anyway.
  static const Loaded& loaded = *new Loaded(load());
  return loaded.api;
}

}  // namespace spendcap::libpq
