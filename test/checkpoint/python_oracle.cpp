// Python oracle runner for the checkpoint and reporting suites.
#include "test/checkpoint/python_oracle.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace nmt::test {
namespace {

constexpr int kExitPackageMissing = 3;  // the scripts' exit status when an import fails
constexpr int kExitCommandNotFound = 127;

int run_command(const std::string& command, std::string& output) {
  output.clear();
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot run: " + command);
  char buffer[4096];
  size_t count = 0;
  while ((count = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, count);
  int status = pclose(pipe);
  if (status == -1) throw std::runtime_error("cannot wait for: " + command);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

nlohmann::json run_python_oracle(const std::string& script, const std::string& args,
                                 const std::string& scratch_dir) {
  std::string out_file = scratch_dir + "/oracle-output.json";
  std::string output;
  int status = run_command("python3 " + script + " " + args + " " + out_file, output);
  if (status == kExitCommandNotFound)
    throw std::runtime_error("python3 not found (it runs the oracle " + script +
                             "): run scripts/install-deps.sh");
  if (status == kExitPackageMissing) throw std::runtime_error(output);
  if (status != 0)
    throw std::runtime_error(script + " failed with status " + std::to_string(status) + ":\n" +
                             output);
  std::ifstream in(out_file);
  if (!in) throw std::runtime_error(script + " wrote no " + out_file + ":\n" + output);
  return nlohmann::json::parse(in);
}

}  // namespace nmt::test
