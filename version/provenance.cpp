// Provenance: the build's identity (version, commit, build type, compiler, CUDA toolkit: compile
// definitions from version/CMakeLists.txt) with the runtime libraries, as JSON and as --version
// text.
#include "version/provenance.h"

namespace nmt {

const char* project_version() {
  return NMT_VERSION;
}

Provenance provenance() {
  Provenance p;
  p.version = project_version();
  p.commit = build_commit();
  p.build_type = NMT_BUILD_TYPE;
  p.compiler = NMT_COMPILER;
  p.cuda_toolkit = NMT_CUDA_TOOLKIT;
  p.libraries = loaded_runtime_libraries();
  return p;
}

namespace {

nlohmann::json optional_text(const std::optional<std::string>& text) {
  return text ? nlohmann::json(*text) : nlohmann::json(nullptr);
}

std::string library_line(const char* name, const std::optional<std::string>& version) {
  return std::string(name) + " " + (version ? *version : "not linked by this tool") + "\n";
}

}  // namespace

nlohmann::json to_json(const Provenance& p) {
  return {{"version", p.version},
          {"commit", p.commit},
          {"build_type", p.build_type},
          {"compiler", p.compiler},
          {"cuda_toolkit", p.cuda_toolkit},
          {"cuda_runtime", optional_text(p.libraries.cuda_runtime)},
          {"cuda_driver", optional_text(p.libraries.cuda_driver)},
          {"cublas", optional_text(p.libraries.cublas)},
          {"nccl", optional_text(p.libraries.nccl)}};
}

std::string format_version(const std::string& tool, const Provenance& p) {
  std::string text = tool + " " + p.version + " (commit " + p.commit + ")\n";
  text += "built: " + p.build_type + ", " + p.compiler + ", CUDA toolkit " + p.cuda_toolkit + "\n";
  const RuntimeLibraries& libs = p.libraries;
  text += library_line("CUDA runtime", libs.cuda_runtime);
  if (libs.cuda_driver)
    text += "CUDA driver " +
            (*libs.cuda_driver == "none" ? std::string("none (no NVIDIA driver on this machine)")
                                         : *libs.cuda_driver) +
            "\n";
  text += library_line("cuBLAS", libs.cublas);
  text += library_line("NCCL", libs.nccl);
  text.pop_back();  // CLI11 ends the version text with its own newline
  return text;
}

}  // namespace nmt
