#include "spendcap/base/dynamic_library.hpp"

#include <dlfcn.h>

#include <utility>

#include "spendcap/base/error.hpp"

namespace spendcap {

DynamicLibrary::DynamicLibrary(const std::string& path, const std::string& what) : path_(path) {
  handle_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char* reason = ::dlerror();
    throw Error(what + " library " + path, reason ? reason : "cannot be loaded",
                "install it, or name another file");
  }
}

DynamicLibrary::~DynamicLibrary() {
  if (handle_) ::dlclose(handle_);
}

DynamicLibrary::DynamicLibrary(DynamicLibrary&& other) noexcept
    : path_(std::move(other.path_)), handle_(std::exchange(other.handle_, nullptr)) {}

DynamicLibrary& DynamicLibrary::operator=(DynamicLibrary&& other) noexcept {
  if (this != &other) {
    if (handle_) ::dlclose(handle_);
    path_ = std::move(other.path_);
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void* DynamicLibrary::symbol(const char* name) const {
  return handle_ ? ::dlsym(handle_, name) : nullptr;
}

}  // namespace spendcap
