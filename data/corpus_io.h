// File plumbing shared by the corpus readers and writers: read-only memory maps, and output files
// that appear under their final name only once complete (temp file, fsync, rename).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace nmt {

// A whole file mapped read-only. An empty file maps to an empty view (mmap rejects length 0).
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws std::runtime_error naming the file
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const char* data() const { return data_; }
  size_t size() const { return size_; }
  std::string_view view() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  void release();
  std::string path_;
  const char* data_ = nullptr;
  size_t size_ = 0;
};

// Writes `path` through a temporary sibling file: nothing under `path` changes until commit(),
// and a writer destroyed without commit() removes its temporary file.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* bytes, size_t count);  // buffered append
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Overwrites already-written bytes at `offset` (used to fill in a header last).
  void write_at(uint64_t offset, const void* bytes, size_t count);
  uint64_t bytes_written() const { return written_; }
  // Flushes, fsyncs and renames onto the final path.
  void commit();
  const std::string& path() const { return path_; }

 private:
  void flush_buffer();
  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  std::string buffer_;
  uint64_t written_ = 0;
};

// The whole contents of a file; throws naming it when it cannot be read.
std::string read_file(const std::string& path);

// Writes a whole small file atomically.
void write_file_atomically(const std::string& path, std::string_view contents);

// 64-bit FNV-1a, used for vocabulary fingerprints (not a cryptographic hash).
uint64_t fnv1a64(std::string_view bytes, uint64_t state = 0xcbf29ce484222325ULL);

}  // namespace nmt
