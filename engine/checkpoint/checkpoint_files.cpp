// Durable file I/O: POSIX open/write/fsync/rename, each failure named with strerror.
#include "engine/checkpoint/checkpoint_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/crc32c.h"

namespace nmt {
namespace {

std::string system_reason() {
  return std::strerror(errno);
}

}  // namespace

DurableFile::DurableFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw CheckpointError("cannot create " + path + ": " + system_reason());
}

DurableFile::~DurableFile() {
  if (fd_ >= 0) ::close(fd_);
}

void DurableFile::write(const void* data, size_t size) {
  if (fd_ < 0) throw CheckpointError("cannot write " + path_ + ": already closed");
  const char* p = static_cast<const char*>(data);
  size_t left = size;
  while (left > 0) {
    // Linux writes at most ~2 GiB per call; a short write is continued, not an error.
    ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw CheckpointError("cannot write " + path_ + " (after " + std::to_string(bytes_) +
                            " bytes): " + system_reason());
    }
    crc_ = nmt::crc32c(p, static_cast<size_t>(n), crc_);
    p += n;
    left -= static_cast<size_t>(n);
    bytes_ += static_cast<uint64_t>(n);
  }
}

void DurableFile::sync_and_close() {
  if (fd_ < 0) return;
  int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0) {
    std::string reason = system_reason();
    ::close(fd);
    throw CheckpointError("cannot sync " + path_ + " to disk: " + reason);
  }
  // close can report a deferred write error (NFS, full disk): the file is not complete then.
  if (::close(fd) != 0) throw CheckpointError("cannot close " + path_ + ": " + system_reason());
}

void fsync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw CheckpointError("cannot open directory " + dir + ": " + system_reason());
  // Some file systems cannot sync a directory (EINVAL): their renames are as durable as they get.
  if (::fsync(fd) != 0 && errno != EINVAL) {
    std::string reason = system_reason();
    ::close(fd);
    throw CheckpointError("cannot sync directory " + dir + ": " + reason);
  }
  ::close(fd);
}

void write_file_atomically(const std::string& path, const std::string& text) {
  std::filesystem::path target(path);
  std::string temp = path + ".tmp-" + std::to_string(::getpid());
  try {
    DurableFile file(temp);
    file.write(text.data(), text.size());
    file.sync_and_close();
    if (::rename(temp.c_str(), path.c_str()) != 0)
      throw CheckpointError("cannot rename " + temp + " to " + path + ": " + system_reason());
  } catch (...) {
    ::unlink(temp.c_str());
    throw;
  }
  std::string parent = target.parent_path().string();
  fsync_directory(parent.empty() ? "." : parent);
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError("cannot open " + path + ": " + system_reason());
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw CheckpointError("cannot read " + path);
  return text.str();
}

}  // namespace nmt
