// Provenance (version/provenance.h): the version numbers' text, the commit the build read from git,
// and the runtime libraries found in this process, which links the CUDA runtime, cuBLAS and NCCL
// (their versions asked directly must match; no GPU needed).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <regex>
#include <string>

#include "test/support/catch.h"
#include "version/provenance.h"

namespace {

// `git rev-parse --short=12 HEAD` in the working directory (ctest runs in the source tree), "" if
// git or the checkout is missing.
std::string git_head() {
  std::FILE* pipe = ::popen("git rev-parse --short=12 HEAD 2>/dev/null", "r");
  if (pipe == nullptr) return "";
  char buffer[64] = {};
  std::string out = std::fgets(buffer, sizeof buffer, pipe) ? buffer : "";
  ::pclose(pipe);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

}  // namespace

TEST_CASE("version numbers as text", "[version]") {
  CHECK(nmt::cuda_version_text(13000) == "13.0");
  CHECK(nmt::cuda_version_text(12080) == "12.8");
  CHECK(nmt::nccl_version_text(22809) == "2.28.9");
  CHECK(nmt::nccl_version_text(21803) == "2.18.3");
  CHECK(nmt::nccl_version_text(2708) == "2.7.8");
}

TEST_CASE("the commit is the checkout's HEAD, or unknown outside git", "[version]") {
  const std::string commit = nmt::build_commit();
  const std::string head = git_head();
  if (head.empty()) {
    CHECK(commit == "unknown");
  } else {
    CHECK((commit == head || commit == head + "-dirty"));
  }
  CHECK(std::regex_match(commit, std::regex("[0-9a-f]{12}(-dirty)?|unknown")));
}

TEST_CASE("the runtime libraries of this process, asked at run time", "[version]") {
  // Use each library so the linker keeps it (the answer is about what is loaded).
  int runtime = 0, driver = 0, nccl = 0, cublas_major = 0;
  REQUIRE(cudaRuntimeGetVersion(&runtime) == cudaSuccess);
  REQUIRE(cudaDriverGetVersion(&driver) == cudaSuccess);
  REQUIRE(ncclGetVersion(&nccl) == ncclSuccess);
  REQUIRE(cublasGetProperty(MAJOR_VERSION, &cublas_major) == CUBLAS_STATUS_SUCCESS);

  const nmt::RuntimeLibraries libs = nmt::loaded_runtime_libraries();
  REQUIRE(libs.cuda_runtime);
  CHECK(*libs.cuda_runtime == nmt::cuda_version_text(runtime));
  REQUIRE(libs.cuda_driver);
  CHECK(*libs.cuda_driver == (driver == 0 ? "none" : nmt::cuda_version_text(driver)));
  REQUIRE(libs.nccl);
  CHECK(*libs.nccl == nmt::nccl_version_text(nccl));
  REQUIRE(libs.cublas);
  CHECK(libs.cublas->starts_with(std::to_string(cublas_major) + "."));
}

TEST_CASE("--version text and JSON carry every field", "[version]") {
  nmt::Provenance p = nmt::provenance();
  p.libraries.nccl.reset();  // as in a tool that does not link NCCL
  const std::string text = nmt::format_version("nmt-tool", p);
  CHECK(text.starts_with("nmt-tool " + p.version + " (commit " + p.commit + ")\n"));
  CHECK(text.find("\nbuilt: " + p.build_type) != std::string::npos);
  CHECK(text.find("\nNCCL not linked by this tool") != std::string::npos);
  CHECK(text.find("\nCUDA runtime " + *p.libraries.cuda_runtime) != std::string::npos);
  CHECK(text.back() != '\n');

  const nlohmann::json j = nmt::to_json(p);
  for (const char* key : {"version", "commit", "build_type", "compiler", "cuda_toolkit",
                          "cuda_runtime", "cuda_driver", "cublas", "nccl"})
    CHECK(j.contains(key));
  CHECK(j["nccl"].is_null());
  CHECK(j["cuda_runtime"] == *p.libraries.cuda_runtime);
  CHECK(j["version"] == p.version);
  CHECK(std::regex_match(p.version, std::regex("[0-9]+\\.[0-9]+\\.[0-9]+")));
}
