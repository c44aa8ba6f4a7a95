// ScratchDir: a unique directory per object (pid and a process-wide counter keep parallel test
// processes and threads apart).
#include "test/support/lib/scratch_dir.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>

namespace nmt::test {

ScratchDir::ScratchDir(const std::string& prefix) {
  static std::atomic<int> counter{0};
  path_ = (std::filesystem::temp_directory_path() /
           (prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++)))
              .string();
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace nmt::test
