#pragma once
// A GPU library opened at run time and its table of function pointers.
//
// Every function in probe/ takes a LoadedApi<...> rather than opening libraries itself, so the
// GoogleTest suite can hand it a fake table (or none) and check each path without a GPU.
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/dynlib.h"

namespace parallax {

template <class Api>
struct LoadedApi {
  const Api* api = nullptr;  // null when the library or one of its symbols is missing
  std::string library;       // the file that loaded (empty when none did)
  std::string error;         // why api is null (empty when it is not)
};

// Opens a library once per process and keeps it open: unloading cuBLASLt (~0.5 GB) or the
// driver between calls would cost seconds and break handles held by other libraries.
// A failed load is retried on the next get(), so set_library_dirs() can still fix it.
template <class Api>
class ApiLibrary {
 public:
  using Binder = void (*)(SymbolBinder&, Api&);

  ApiLibrary(std::vector<std::string> names, Binder bind) : names_(std::move(names)), bind_(bind) {}

  LoadedApi<Api> get() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (lib_ != nullptr) return {&api_, lib_->path(), ""};
    auto lib = std::make_unique<DynLib>();
    if (!lib->open(names_)) return {nullptr, "", lib->error()};
    SymbolBinder binder(*lib);
    bind_(binder, api_);
    if (!binder.complete()) return {nullptr, lib->path(), binder.error()};
    lib_ = std::move(lib);
    return {&api_, lib_->path(), ""};
  }

 private:
  std::vector<std::string> names_;
  Binder bind_;
  std::mutex mutex_;
  std::unique_ptr<DynLib> lib_;
  Api api_{};
};

}  // namespace parallax
