// run_card_command: posix_spawnp of python3 and the exit status, without a shell.
#include "engine/report/run_card_command.h"

#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>

extern char** environ;

namespace nmt {

std::string run_card_script(const std::string& built_in) {
  const char* env = std::getenv("NMT_RUN_CARD_SCRIPT");
  return env && *env ? std::string(env) : built_in;
}

int run_python_script(const std::string& script, const std::vector<std::string>& args,
                      std::string& why) {
  std::vector<std::string> words = {"python3", script};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  std::cout << std::flush;
  std::cerr << std::flush;
  pid_t pid = 0;
  int status = posix_spawnp(&pid, "python3", nullptr, nullptr, argv.data(), environ);
  if (status != 0) {
    why = std::string("cannot start python3: ") + std::strerror(status);
    return 127;
  }
  int wait_status = 0;
  while (waitpid(pid, &wait_status, 0) < 0)
    if (errno != EINTR) {
      why = std::string("waitpid: ") + std::strerror(errno);
      return 127;
    }
  if (WIFSIGNALED(wait_status)) {
    why = std::string("python3 ended by signal ") + std::to_string(WTERMSIG(wait_status));
    return 128 + WTERMSIG(wait_status);
  }
  int code = WEXITSTATUS(wait_status);
  // posix_spawnp may report a missing program only through the child's exit status 127.
  if (code == 127) why = "python3 not found";
  return code;
}

void write_run_card_quietly(const std::string& script, const std::string& run_dir,
                            std::ostream& out) {
  try {
    std::string why;
    int code = run_python_script(script, {run_dir, "--quiet"}, why);
    if (code != 0)
      out << "run card: not written (" << (why.empty() ? "exit " + std::to_string(code) : why)
          << "); the run is complete: nmt-report " << run_dir << " writes it later\n";
  } catch (const std::exception& e) {
    out << "run card: not written (" << e.what() << ")\n";
  }
  out << std::flush;
}

}  // namespace nmt
