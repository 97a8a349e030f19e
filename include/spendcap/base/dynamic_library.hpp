// DynamicLibrary: the one dlopen wrapper. NVML, libcurl and libpq are loaded through it at run
// time, never linked, so a run that does not use them does not pay for them (the dynamic loader's
// work for a linked library is paid on every exec) and a host without them still runs spendcap.
//
// Symbols are resolved one at a time: a missing symbol (an older driver's NVML lacks the _v3
// functions) is nullptr for that one function, and the caller turns off that one measurement.
// Owns the handle (dlclose on destruction); movable, not copyable; thread-safe as dlsym is.
#pragma once

#include <string>

namespace spendcap {

class DynamicLibrary {
 public:
  // dlopen(RTLD_NOW | RTLD_LOCAL). Throws Error naming `what` (e.g. "NVML") and the path, with
  // dlerror()'s reason, when the library cannot be loaded.
  DynamicLibrary(const std::string& path, const std::string& what);
  ~DynamicLibrary();
  DynamicLibrary(DynamicLibrary&& other) noexcept;
  DynamicLibrary& operator=(DynamicLibrary&& other) noexcept;
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;

  // The function `name` as type `Function` (a function pointer type), or nullptr when the
  // library lacks it.
  template <typename Function>
  Function function(const char* name) const {
    return reinterpret_cast<Function>(symbol(name));
  }
  void* symbol(const char* name) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void* handle_ = nullptr;
};

}  // namespace spendcap
