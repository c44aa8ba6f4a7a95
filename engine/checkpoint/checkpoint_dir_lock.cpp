// The checkpoint directory lock: flock on <dir>/.lock, holder recorded as one line of JSON.
#include "engine/checkpoint/checkpoint_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/checkpoint/checkpoint_files.h"

namespace nmt {

namespace {

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown host";
  return name;
}

std::string local_time_now() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char text[64];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S %z", &tm);
  return text;
}

// What the holder wrote, for the message: "pid 123 on node-a since 2025-01-01 10:00:00 +0000".
std::string describe_holder(int fd) {
  std::string text;
  char buffer[512];
  ssize_t n;
  ::lseek(fd, 0, SEEK_SET);
  while ((n = ::read(fd, buffer, sizeof buffer)) > 0 && text.size() < 4096)
    text.append(buffer, static_cast<size_t>(n));
  nlohmann::json holder = nlohmann::json::parse(text, nullptr, false);
  if (!holder.is_object() || !holder.contains("pid")) return "another process";
  return "pid " + holder["pid"].dump() + " on " + holder.value("host", std::string("?")) +
         " since " + holder.value("started", std::string("?"));
}

}  // namespace

CheckpointDirLock::CheckpointDirLock(const std::string& dir) : path_(dir + "/.lock") {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw CheckpointError("cannot open the lock file " + path_ + ": " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    int error = errno;
    if (error == EWOULDBLOCK) {
      std::string holder = describe_holder(fd_);
      ::close(fd_);
      fd_ = -1;
      throw CheckpointError("checkpoint.dir " + dir + " is in use by another run (" + holder +
                            ", lock " + path_ +
                            "): two runs in one directory would prune and resume each other's "
                            "checkpoints; choose another checkpoint.dir or stop that run first");
    }
    // NFS without lockd, some parallel file systems: go on, but say that nothing guards the dir.
    warning_ = "cannot lock " + path_ + " (" + std::strerror(error) +
               "): nothing stops a second run from using the same checkpoint.dir";
    return;
  }
  nlohmann::json holder = {{"pid", static_cast<long long>(::getpid())},
                           {"host", host_name()},
                           {"started", local_time_now()}};
  std::string text = holder.dump() + "\n";
  // Informational only (the lock is the flock): a failed write leaves a shorter description.
  if (::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, text.data(), text.size(), 0) < 0) {
    warning_ = "cannot record the holder in " + path_ + ": " + std::strerror(errno);
  }
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace nmt
