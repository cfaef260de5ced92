#include "common/dynlib.h"

#include <dlfcn.h>

namespace parallax {

namespace {
std::vector<std::string>& dirs_storage() {
  static std::vector<std::string> dirs;
  return dirs;
}
}  // namespace

void set_library_dirs(const std::vector<std::string>& dirs) { dirs_storage() = dirs; }
const std::vector<std::string>& library_dirs() { return dirs_storage(); }

DynLib::~DynLib() {
  if (handle_ != nullptr) dlclose(handle_);
}

bool DynLib::open(const std::vector<std::string>& names) {
  std::vector<std::string> attempts;
  for (const auto& dir : library_dirs())
    for (const auto& name : names) attempts.push_back(dir + "/" + name);
  for (const auto& name : names) attempts.push_back(name);
  error_.clear();
  for (const auto& candidate : attempts) {
    handle_ = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ != nullptr) {
      path_ = candidate;
      return true;
    }
  }
  const char* last = dlerror();
  error_ = "could not load " + names.front() + (last ? std::string(": ") + last : "");
  return false;
}

void* DynLib::symbol(const char* name) const {
  return handle_ == nullptr ? nullptr : dlsym(handle_, name);
}

}  // namespace parallax
