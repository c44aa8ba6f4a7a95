// Test helpers shared by the checkpoint and reporting suites: running a Python oracle script (the
// safetensors / tensorboard packages) and scratch directories removed at the end of a test.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace nmt::test {

// Runs `python3 <script> <args>` from the repository root; the script writes its answer as JSON
// to the file named by its last argument. Throws std::runtime_error (failing the test case) when
// python3 or a package is missing ("run scripts/install-deps.sh") or the script fails.
nlohmann::json run_python_oracle(const std::string& script, const std::string& args,
                                 const std::string& scratch_dir);

// A fresh directory under the system temp dir, removed (with its contents) on destruction.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The message of the exception `action` throws ("" when it throws none).
template <typename Action>
std::string error_of(Action&& action) {
  try {
    action();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace nmt::test
