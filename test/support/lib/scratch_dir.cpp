// ScratchDir: a unique directory per object (pid and a process-wide counter keep parallel test
// processes and threads apart); line-file helpers.
#include "test/support/lib/scratch_dir.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

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

std::vector<std::string> read_lines(const std::string& path, size_t first, size_t count) {
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("cannot open " + path + " (the shared corpora beside the repo)");
  std::vector<std::string> lines;
  std::string line;
  for (size_t i = 0; lines.size() < count && std::getline(in, line); ++i)
    if (i >= first) lines.push_back(line);
  return lines;
}

void write_lines(const std::string& path, const std::vector<std::string>& lines) {
  std::ofstream out(path, std::ios::binary);
  for (const std::string& line : lines) out << line << '\n';
}

std::string shared_data_dir() {
  const char* root = std::getenv("NMT_DATA_ROOT");
  return root && *root ? std::string(root) : std::string("../shared/data");
}

}  // namespace nmt::test
