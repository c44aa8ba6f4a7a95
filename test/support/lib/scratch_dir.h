// Test helpers every suite may use: a scratch directory removed at the end of a test, the message
// of an expected exception (portable across Catch2 2 and 3), a substring check, and reading and
// writing files of lines (slices of the shared corpora).
#pragma once

#include <cstddef>
#include <exception>
#include <string>
#include <vector>

namespace nmt::test {

// A fresh directory under the system temp dir (`prefix`-pid-counter), removed with its contents
// on destruction.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix = "nmt-test");
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The what() of the exception `action` throws, or "" when it throws none.
template <typename Action>
std::string error_of(Action&& action) {
  try {
    action();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Lines [first, first + count) of a text file (fewer where it ends); throws std::runtime_error
// naming the file when it cannot be opened.
std::vector<std::string> read_lines(const std::string& path, size_t first, size_t count);

// The folder of the shared corpora (bible-en-es/, lohelp-en-de/, ...): $NMT_DATA_ROOT when set (the
// GPU machine, where ../shared does not travel), else ../shared/data beside the repository.
std::string shared_data_dir();

// Writes each line followed by '\n' (binary: no newline translation).
void write_lines(const std::string& path, const std::vector<std::string>& lines);

}  // namespace nmt::test
