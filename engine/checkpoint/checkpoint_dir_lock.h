// CheckpointDirLock: one training run per checkpoint.dir. An advisory lock (flock) on
// <dir>/.lock that records who holds it (pid, host, start time); the kernel drops it when the
// holder exits or dies, so a lock left by a crash never blocks a resume.
#pragma once

#include <string>

namespace nmt {

class CheckpointDirLock {
 public:
  // Takes the lock on `dir` (which must exist). Throws CheckpointError naming the lock file and
  // its holder when another process holds it. On a file system without flock support the run
  // goes on unlocked, and `warning()` says so.
  explicit CheckpointDirLock(const std::string& dir);
  ~CheckpointDirLock();  // releases the lock (the file stays: removing it would race a new holder)
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;

  const std::string& path() const { return path_; }
  const std::string& warning() const { return warning_; }

 private:
  std::string path_;
  std::string warning_;
  int fd_ = -1;
};

}  // namespace nmt
