// Memory maps and atomic (temp + fsync + rename) output files.
#include "data/corpus_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace nmt {

namespace {

std::string errno_text() {
  return std::strerror(errno);
}

constexpr size_t kWriteBufferBytes = 1 << 20;

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + path + ": " + errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    std::string why = errno_text();
    ::close(fd);
    throw std::runtime_error("cannot stat " + path + ": " + why);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw std::runtime_error(path + " is not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      std::string why = errno_text();
      ::close(fd);
      throw std::runtime_error("cannot map " + path + ": " + why);
    }
    data_ = static_cast<const char*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
}

MappedFile::~MappedFile() {
  release();
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

void MappedFile::release() {
  if (data_ != nullptr) ::munmap(const_cast<char*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  // pid + a process-wide counter keep concurrent writers (threads, processes) apart.
  static std::atomic<uint64_t> counter{0};
  temp_path_ =
      path_ + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::runtime_error("cannot create " + temp_path_ + ": " + errno_text());
  buffer_.reserve(kWriteBufferBytes);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_path_.c_str());
  }
}

void AtomicFileWriter::write(const void* bytes, size_t count) {
  if (fd_ < 0) throw std::logic_error("write after commit: " + path_);
  if (buffer_.size() + count > kWriteBufferBytes) flush_buffer();
  if (count >= kWriteBufferBytes) {
    buffer_.append(static_cast<const char*>(bytes), count);
    flush_buffer();
  } else {
    buffer_.append(static_cast<const char*>(bytes), count);
  }
  written_ += count;
}

void AtomicFileWriter::flush_buffer() {
  const char* p = buffer_.data();
  size_t left = buffer_.size();
  while (left > 0) {
    ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("cannot write " + temp_path_ + ": " + errno_text());
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  buffer_.clear();
}

void AtomicFileWriter::write_at(uint64_t offset, const void* bytes, size_t count) {
  if (offset + count > written_) throw std::logic_error("write_at past the end: " + path_);
  flush_buffer();
  const char* p = static_cast<const char*>(bytes);
  while (count > 0) {
    ssize_t n = ::pwrite(fd_, p, count, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("cannot write " + temp_path_ + ": " + errno_text());
    }
    p += n;
    offset += static_cast<uint64_t>(n);
    count -= static_cast<size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  flush_buffer();
  if (::fsync(fd_) != 0)
    throw std::runtime_error("cannot sync " + temp_path_ + ": " + errno_text());
  if (::close(fd_) != 0) {
    fd_ = -1;
    ::unlink(temp_path_.c_str());
    throw std::runtime_error("cannot close " + temp_path_ + ": " + errno_text());
  }
  fd_ = -1;
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    std::string why = errno_text();
    ::unlink(temp_path_.c_str());
    throw std::runtime_error("cannot rename " + temp_path_ + " to " + path_ + ": " + why);
  }
}

std::string read_file(const std::string& path) {
  MappedFile file(path);
  return std::string(file.view());
}

void write_file_atomically(const std::string& path, std::string_view contents) {
  AtomicFileWriter out(path);
  out.write(contents);
  out.commit();
}

uint64_t fnv1a64(std::string_view bytes, uint64_t state) {
  for (unsigned char c : bytes) {
    state ^= c;
    state *= 0x100000001b3ULL;
  }
  return state;
}

}  // namespace nmt
