// Versions of the CUDA runtime, driver, cuBLAS and NCCL loaded in this process. The libraries are
// found among the shared objects already loaded (dl_iterate_phdr) and asked through dlsym, so the
// answer is the library this program actually runs with, a program that does not link one says
// so, and nothing here links CUDA itself.
#include <dlfcn.h>
#include <link.h>

#include <cstring>
#include <string>

#include "version/provenance.h"

namespace nmt {
namespace {

// The path of the loaded shared object whose file name starts with `prefix` ("libcudart.so"),
// "" if none is loaded.
std::string loaded_object(const char* prefix) {
  struct Search {
    const char* prefix;
    std::string path;
  } search{prefix, ""};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        const char* path = info->dlpi_name;
        if (path == nullptr || *path == '\0') return 0;
        const char* slash = std::strrchr(path, '/');
        const char* name = slash ? slash + 1 : path;
        if (std::strncmp(name, s->prefix, std::strlen(s->prefix)) != 0) return 0;
        s->path = path;
        return 1;
      },
      &search);
  return search.path;
}

// A function of an already loaded library; nullptr when the library is not loaded or lacks it.
// RTLD_NOLOAD: never loads anything, only takes another reference to what is there.
template <typename Function>
Function* loaded_function(const char* library_prefix, const char* symbol) {
  const std::string path = loaded_object(library_prefix);
  if (path.empty()) return nullptr;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) return nullptr;
  void* function = dlsym(handle, symbol);
  dlclose(handle);  // the program's own reference keeps it loaded
  return reinterpret_cast<Function*>(function);
}

// The C signatures, with the libraries' enums and status types as the ints they are.
using IntQuery = int(int*);                  // cudaRuntimeGetVersion, ncclGetVersion, ...
using CublasPropertyQuery = int(int, int*);  // cublasGetProperty(libraryPropertyType, int*)

std::optional<std::string> cublas_version() {
  auto* get_property = loaded_function<CublasPropertyQuery>("libcublas.so", "cublasGetProperty");
  if (get_property == nullptr) return std::nullopt;
  int parts[3] = {0, 0, 0};  // MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
  for (int i = 0; i < 3; ++i)
    if (get_property(i, &parts[i]) != 0) return "unknown";
  return std::to_string(parts[0]) + "." + std::to_string(parts[1]) + "." + std::to_string(parts[2]);
}

}  // namespace

std::string cuda_version_text(int code) {
  return std::to_string(code / 1000) + "." + std::to_string(code % 1000 / 10);
}

std::string nccl_version_text(int code) {
  const bool old_scheme = code < 20900;  // NCCL before 2.9 encoded major*1000 + minor*100 + patch
  const int major = old_scheme ? code / 1000 : code / 10000;
  const int minor = old_scheme ? code % 1000 / 100 : code % 10000 / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

RuntimeLibraries loaded_runtime_libraries() {
  RuntimeLibraries out;
  if (auto* runtime = loaded_function<IntQuery>("libcudart.so", "cudaRuntimeGetVersion")) {
    int code = 0;
    out.cuda_runtime = runtime(&code) == 0 ? cuda_version_text(code) : "unknown";
  }
  if (auto* driver = loaded_function<IntQuery>("libcudart.so", "cudaDriverGetVersion")) {
    int code = 0;  // 0 (with success) when no driver is installed
    out.cuda_driver = driver(&code) != 0 ? "unknown" : code == 0 ? "none" : cuda_version_text(code);
  }
  out.cublas = cublas_version();
  if (auto* nccl = loaded_function<IntQuery>("libnccl.so", "ncclGetVersion")) {
    int code = 0;
    out.nccl = nccl(&code) == 0 ? nccl_version_text(code) : "unknown";
  }
  return out;
}

}  // namespace nmt
