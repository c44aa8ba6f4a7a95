// Durable file I/O for checkpoints: a write-only file that checksums what it writes and is fsynced
// before close, directory fsync, atomic whole-file replacement, and a read-only memory map.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace nmt {

// Every checkpoint I/O failure (unwritable directory, full disk, missing, truncated or corrupt
// file, model mismatch): one message naming the file.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A new file (truncated if present) written front to back. Every failure throws CheckpointError
// naming the path and the system's reason; the destructor closes without syncing.
class DurableFile {
 public:
  explicit DurableFile(const std::string& path);
  ~DurableFile();
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;

  void write(const void* data, size_t size);
  // fsync, then close: the bytes are on disk when this returns.
  void sync_and_close();

  uint64_t bytes_written() const { return bytes_; }
  uint32_t crc32c() const { return crc_; }  // of every byte written
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t bytes_ = 0;
  uint32_t crc_ = 0;
};

// fsync a directory so that the names created, renamed or removed in it are durable.
void fsync_directory(const std::string& dir);

// Replaces `path` with `text` atomically: a temporary file in the same directory, fsynced, renamed
// over `path`, the directory fsynced. A failure leaves `path` as it was.
void write_file_atomically(const std::string& path, const std::string& text);

// The whole file, read; throws CheckpointError naming it.
std::string read_text_file(const std::string& path);

}  // namespace nmt
