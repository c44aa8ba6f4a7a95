// safetensors files (Hugging Face's format, loadable by PyTorch): an 8-byte little-endian header
// size N, N bytes of JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}
// padded with spaces to 8-byte alignment, then the tensors' raw little-endian bytes, back to back.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "data/corpus_io.h"
#include "engine/checkpoint/checkpoint_files.h"

namespace nmt {

// A malformed, truncated or mismatched safetensors file: the message names the file (and the
// tensor where there is one).
class SafetensorsError : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

// One tensor to write: fp32 on the host.
struct SafetensorsTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;  // [prod(shape)] f32, host
};

struct SafetensorsFileInfo {
  uint64_t bytes = 0;   // the whole file
  uint32_t crc32c = 0;  // of the whole file
};

// Writes `tensors` (in this order) and the string `metadata` to `path`, through a temporary file in
// the same directory that is fsynced and renamed: `path` is either the old file or the complete
// new one. Throws CheckpointError naming the file (unwritable directory, full disk) and
// std::invalid_argument for a duplicate or empty tensor name.
SafetensorsFileInfo write_safetensors(const std::string& path,
                                      const std::vector<SafetensorsTensor>& tensors,
                                      const std::map<std::string, std::string>& metadata);

struct SafetensorsTensorInfo {
  std::string name;
  std::string dtype;  // "F32", "BF16", "I64" ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section

  int64_t numel() const;
};

std::string shape_to_string(const std::vector<int64_t>& shape);  // "[512, 2048]"

// A safetensors file, memory-mapped and validated on open: the file is at least 8 bytes, the
// header lies inside it, is a JSON object of well-formed entries, every dtype is known, every byte
// range matches its dtype and shape and lies inside the data, and the ranges tile the data
// without overlap, gap or trailing bytes (as the reference implementation requires).
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);

  const std::string& path() const { return file_.path(); }
  uint64_t file_size() const { return file_.size(); }
  const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }  // by offset
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const SafetensorsTensorInfo* find(std::string_view name) const;

  // The raw bytes of one tensor: [end - begin] bytes inside the mapping.
  const unsigned char* data(const SafetensorsTensorInfo& tensor) const;

  // Copies tensor `name` into `out`: it must exist, be F32 and have `expected_shape`.
  void read_f32(const std::string& name, const std::vector<int64_t>& expected_shape,
                float* out) const;  // out: [prod(expected_shape)] f32, host

  uint32_t file_crc32c() const;

 private:
  [[noreturn]] void fail(const std::string& what) const;
  void parse_header(uint64_t header_size);
  void check_layout(uint64_t data_size);

  const unsigned char* bytes() const {
    return reinterpret_cast<const unsigned char*>(file_.data());
  }
  MappedFile file_;
  uint64_t data_start_ = 0;
  std::vector<SafetensorsTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace nmt
