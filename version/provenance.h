// Provenance: what a binary is and what it runs on. The project version and the git commit it was
// built from (read by CMake at build time, "unknown" outside a git checkout), how it was built, and
// the versions of the CUDA runtime and driver, cuBLAS and NCCL that this process has loaded,
// queried at run time (no GPU needed). One implementation behind every tool's --version, the
// `start` event of metrics.jsonl and report.json.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace nmt {

// The project's version (CMake's project VERSION), "0.1.0".
const char* project_version();

// The commit of the source tree at build time: 12 hex digits, "-dirty" when tracked files had
// changes, or "unknown" (defined in the generated git_commit.cpp).
const char* build_commit();

// Versions of the GPU libraries loaded in this process; nullopt for one the program does not link
// (nmt-bleu and nmt-prep link none). `cuda_driver` is "none" on a machine without the NVIDIA
// driver.
struct RuntimeLibraries {
  std::optional<std::string> cuda_runtime;  // "13.0"
  std::optional<std::string> cuda_driver;  // the newest CUDA the driver supports: "13.0", or "none"
  std::optional<std::string> cublas;       // "13.0.2"
  std::optional<std::string> nccl;         // "2.28.9"
};
RuntimeLibraries loaded_runtime_libraries();

struct Provenance {
  std::string version;       // the project's version, "0.1.0"
  std::string commit;        // build_commit()
  std::string build_type;    // CMAKE_BUILD_TYPE, "Release"
  std::string compiler;      // "GNU 13.3.0"
  std::string cuda_toolkit;  // the toolkit compiled against, "13.0.88"
  RuntimeLibraries libraries;
};
Provenance provenance();

// {"version", "commit", "build_type", "compiler", "cuda_toolkit", "cuda_runtime", "cuda_driver",
//  "cublas", "nccl"}; a library the program does not link is null.
nlohmann::json to_json(const Provenance& p);

// The text of `TOOL --version`: first line "TOOL VERSION (commit COMMIT)", then the build and the
// libraries, one per line.
std::string format_version(const std::string& tool, const Provenance& p);

// Version numbers as the libraries encode them, as text: cudart 13000 -> "13.0", NCCL 22809 ->
// "2.28.9" (NCCL before 2.9: 2708 -> "2.7.8").
std::string cuda_version_text(int code);
std::string nccl_version_text(int code);

}  // namespace nmt
