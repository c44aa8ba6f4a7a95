// The command-line conventions every nmt-* program shares: exit codes (0 ok, 1 runtime error,
// 2 usage or config error), command-line parsing that keeps to them (CLI11's own codes, 105 to
// 115, are not what the tools document), and --version (version/provenance.h).
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "version/provenance.h"

namespace nmt {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntimeError = 1;
inline constexpr int kExitUsageError = 2;

// `--version`: prints format_version(tool, provenance()) to stdout, exit 0 (also when required
// options are missing).
inline void add_version_flag(CLI::App& app, const std::string& tool) {
  app.set_version_flag(
      "--version", [tool] { return format_version(tool, provenance()); },
      "print the version, the git commit built from and the CUDA, cuBLAS and NCCL versions");
}

// Parses the command line. nullopt: go on. Otherwise the code `main` returns: 0 after --help
// (printed), 2 after a usage error (CLI11's message printed to stderr).
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsageError;
  }
  return std::nullopt;
}

}  // namespace nmt
