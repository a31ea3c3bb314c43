#include "runtime/cuda/cublas_library.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "common/error.h"

namespace mosaic::cuda {
namespace {

// The soname the headers were built against, then the toolkit's own folders for a machine whose
// loader does not know them.
const std::string kSoname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);

void* open_library() {
  for (const std::string& name : {kSoname, "/usr/local/cuda/lib64/" + kSoname, "/usr/local/cuda/lib/" + kSoname})
    if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  return nullptr;
}

template <class F>
void bind(void* handle, F& fn, const char* symbol) {
  fn = reinterpret_cast<F>(dlsym(handle, symbol));
  if (!fn)
    throw DeviceError("device cuda", kSoname, std::string("has no ") + symbol + " (an older cuBLAS?)",
                      "install the cuBLAS of CUDA " + std::to_string(CUBLAS_VER_MAJOR) + ", or use --device cpu");
}

}  // namespace

const CublasLibrary& cublas() {
  static std::once_flag once;
  static CublasLibrary lib;
  static std::string error;
  std::call_once(once, [] {
    void* h = open_library();
    if (!h) {
      const char* why = dlerror();
      error = why ? why : "not found";
      return;
    }
    // Symbol names as the library exports them (cublas_v2.h maps the short names onto the _v2 ones).
    try {
      bind(h, lib.create, "cublasCreate_v2");
      bind(h, lib.destroy, "cublasDestroy_v2");
      bind(h, lib.set_stream, "cublasSetStream_v2");
      bind(h, lib.gemm_ex, "cublasGemmEx");
      bind(h, lib.status_string, "cublasGetStatusString");
    } catch (const DeviceError& e) {
      error = e.what();
      lib = {};
    }
  });
  if (!lib.create)
    throw DeviceError("device cuda", kSoname, "cannot be loaded: " + error,
                      "install the CUDA " + std::to_string(CUBLAS_VER_MAJOR) +
                          " toolkit's cuBLAS (or put its folder on LD_LIBRARY_PATH), or use --device cpu");
  return lib;
}

}  // namespace mosaic::cuda
