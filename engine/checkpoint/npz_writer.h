// NumPy .npz archives written without NumPy: a ZIP file (entries stored, not compressed) holding
// one .npy array per entry (format 1.0: magic, a Python-literal header dict padded to 64 bytes,
// then the raw little-endian data in C order). What nmt-export's Marian format needs; numpy.load
// reads the result. Archives and entries above 4 GiB (ZIP64) are refused, not written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace nmt {

struct NpyArray {
  std::string name;            // the entry is "<name>.npy"; numpy.load(...)[name] gives it back
  std::string dtype;           // NumPy's descr: "<f4" (float32) or "|i1" (int8)
  std::vector<int64_t> shape;  // C order; {} for a scalar
  const void* data = nullptr;  // [prod(shape) * itemsize] bytes, host, little-endian
};

// The CRC-32 of ZIP (IEEE 802.3, reflected, as zlib's crc32), continuing from `crc` (0 to start).
uint32_t zip_crc32(const void* data, size_t size, uint32_t crc = 0);

// The .npy bytes of one array (header + data).
std::string npy_bytes(const NpyArray& array);

// Writes `arrays` (in this order) to `path` through a temporary file in the same directory that is
// fsynced and renamed: `path` is either untouched or complete. Deterministic: fixed timestamps
// (1980-01-01), no extra fields. Throws std::invalid_argument for an empty, duplicate or unsafe
// name, an unknown dtype or a size past ZIP's 4 GiB limits; CheckpointError naming the file when it
// cannot be written.
void write_npz(const std::string& path, const std::vector<NpyArray>& arrays);

}  // namespace nmt
