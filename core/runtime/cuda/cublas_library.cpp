#include "runtime/cuda/cublas_library.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "common/error.h"

namespace mosaic::cuda {
namespace {

// The soname the headers were built against, found by the loader; then the toolkit's own folders
// for a machine whose loader does not know them.
const std::string kMajor = std::to_string(CUBLAS_VER_MAJOR);
const std::string kSoname = "libcublas.so." + kMajor;

struct Loaded {
  CublasLibrary lib;
  std::string error;  // empty when loaded
};

void* open_library(std::string& first_error) {
  for (const std::string dir : {"", "/usr/local/cuda/lib64/", "/usr/local/cuda/lib/"}) {
    // cuBLAS needs cuBLASLt of the same folder, which the loader would not find there by itself.
    if (!dir.empty()) dlopen((dir + "libcublasLt.so." + kMajor).c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (void* h = dlopen((dir + kSoname).c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    if (first_error.empty())
      if (const char* why = dlerror()) first_error = why;
  }
  return nullptr;
}

template <class F>
bool bind(void* handle, F& fn, const char* symbol, std::string& error) {
  fn = reinterpret_cast<F>(dlsym(handle, symbol));
  if (!fn) error = kSoname + " has no " + symbol + " (an older cuBLAS?)";
  return fn != nullptr;
}

const Loaded& loaded() {
  static std::once_flag once;
  static Loaded l;
  std::call_once(once, [] {
    void* h = open_library(l.error);
    if (!h) {
      if (l.error.empty()) l.error = kSoname + " was not found";
      return;
    }
    // Symbol names as the library exports them (cublas_v2.h maps the short names onto the _v2 ones).
    CublasLibrary& f = l.lib;
    if (!(bind(h, f.create, "cublasCreate_v2", l.error) && bind(h, f.destroy, "cublasDestroy_v2", l.error) &&
          bind(h, f.set_stream, "cublasSetStream_v2", l.error) && bind(h, f.gemm_ex, "cublasGemmEx", l.error) &&
          bind(h, f.status_string, "cublasGetStatusString", l.error)))
      f = {};
  });
  return l;
}

}  // namespace

std::optional<std::string> cublas_unavailable() {
  const Loaded& l = loaded();
  if (l.lib.create) return std::nullopt;
  return "cuBLAS cannot be loaded (" + l.error + "): install the CUDA " + kMajor +
         " toolkit's cuBLAS, or put its folder on LD_LIBRARY_PATH";
}

const CublasLibrary& cublas() {
  if (const auto why = cublas_unavailable()) throw DeviceError("device cuda", kSoname, *why, "or use --device cpu");
  return loaded().lib;
}

}  // namespace mosaic::cuda
