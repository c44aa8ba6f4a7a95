// Test helpers every suite may use: a scratch directory removed at the end of a test, the message
// of an expected exception (portable across Catch2 2 and 3), and a substring check.
#pragma once

#include <exception>
#include <string>

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

}  // namespace nmt::test
