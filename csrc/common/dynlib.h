#pragma once
// Run-time loading of shared libraries (CUDA driver, NVML, cuBLASLt) so that the
// native core builds and imports on machines without them.
#include <initializer_list>
#include <string>
#include <vector>

namespace parallax {

// Extra directories searched before the system loader path (set from Python, e.g.
// site-packages/nvidia/*/lib of a pip-installed torch or JAX).
void set_library_dirs(const std::vector<std::string>& dirs);
const std::vector<std::string>& library_dirs();

class DynLib {
 public:
  DynLib() = default;
  ~DynLib();
  DynLib(const DynLib&) = delete;
  DynLib& operator=(const DynLib&) = delete;

  // Tries each candidate file name in the extra directories, then through the system
  // loader. Returns false and fills error() when none loads.
  bool open(const std::vector<std::string>& names);
  void* symbol(const char* name) const;
  bool loaded() const { return handle_ != nullptr; }
  const std::string& error() const { return error_; }
  const std::string& path() const { return path_; }

 private:
  void* handle_ = nullptr;
  std::string error_;
  std::string path_;
};

// Fills a table of function pointers from a loaded library. A symbol may have several
// names (newest first, e.g. cuEventElapsedTime_v2 then cuEventElapsedTime); the first
// symbol found by none of its names is remembered so the error can name it.
class SymbolBinder {
 public:
  explicit SymbolBinder(const DynLib& lib) : lib_(lib) {}

  template <class Fn>
  void bind(Fn& fn, std::initializer_list<const char*> names) {
    for (const char* name : names) {
      if (void* address = lib_.symbol(name)) {
        fn = reinterpret_cast<Fn>(address);
        return;
      }
    }
    fn = nullptr;
    if (missing_.empty()) missing_ = *names.begin();
  }

  // A symbol the caller can do without (an older library may lack it): left null when no
  // name is found, and never reported missing. The caller checks the pointer before calling.
  template <class Fn>
  void bind_optional(Fn& fn, std::initializer_list<const char*> names) {
    fn = nullptr;
    for (const char* name : names) {
      if (void* address = lib_.symbol(name)) {
        fn = reinterpret_cast<Fn>(address);
        return;
      }
    }
  }

  bool complete() const { return missing_.empty(); }
  // "<path> lacks <symbol>" for the first missing symbol; empty when complete.
  std::string error() const { return complete() ? "" : lib_.path() + " lacks " + missing_; }

 private:
  const DynLib& lib_;
  std::string missing_;
};

}  // namespace parallax
