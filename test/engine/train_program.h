// Runs the nmt-train program (NMT_TRAIN_BINARY, defined by test/engine/CMakeLists.txt) from a test:
// its exit code and output, optionally sending it a signal once a line appears; and writes a
// RunConfig as a config file for it.
#pragma once

#ifdef NMT_TRAIN_BINARY
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "test/support/catch.h"

namespace nmt::test {

struct ProgramResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs nmt-train with `args` (one thread); with a signal, sends it once `trigger` is printed.
inline ProgramResult run_program(const std::vector<std::string>& args, int signal_number = 0,
                                 const std::string& trigger = "") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    ::setenv("OMP_NUM_THREADS", "1", 1);
    std::vector<char*> argv{const_cast<char*>(NMT_TRAIN_BINARY)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(NMT_TRAIN_BINARY, argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  ProgramResult result;
  bool sent = false;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    result.output.append(buffer, static_cast<size_t>(n));
    if (signal_number != 0 && !sent && result.output.find(trigger) != std::string::npos) {
      ::kill(pid, signal_number);
      sent = true;
    }
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

inline std::string write_config(const std::string& path, const nmt::RunConfig& c) {
  std::ofstream(path) << nmt::format_run_config(c) << "\n";
  return path;
}

}  // namespace nmt::test
#endif
