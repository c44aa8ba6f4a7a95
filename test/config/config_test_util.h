// Helpers of the config suites: a scratch JSON file per test and the message of an expected
// ConfigError.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/config/config.h"
#include "test/support/catch.h"
#include "test/support/lib/scratch_dir.h"

namespace nmt::test {

// Writes `text` to a fresh file under the system temp directory and removes it when destroyed.
class ScratchFile {
 public:
  explicit ScratchFile(const std::string& text) {
    static std::atomic<int> counter{0};
    path_ =
        (std::filesystem::temp_directory_path() / ("nmt-config-test-" + std::to_string(getpid()) +
                                                   "-" + std::to_string(counter++) + ".json"))
            .string();
    std::ofstream(path_) << text;
  }
  ~ScratchFile() { std::filesystem::remove(path_); }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs `body`, which must throw ConfigError, and returns the message.
template <typename Body>
std::string config_error_of(Body body) {
  try {
    body();
  } catch (const ConfigError& error) {
    return error.what();
  }
  FAIL("expected a ConfigError, got none");
  return "";
}

}  // namespace nmt::test
