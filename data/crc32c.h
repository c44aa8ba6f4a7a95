// CRC32C (Castagnoli): the checksum of checkpoint files (state.json records one per file) and of
// TensorBoard's TFRecord framing. Hardware (SSE4.2) when the CPU has it, else slicing-by-8 tables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace nmt {

// The CRC32C of `size` bytes, continuing from `crc` (the result over the bytes before them; 0 to
// start): crc32c(b, nb, crc32c(a, na)) == crc32c(a followed by b).
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

// TFRecord's masked CRC: rotated and offset so that a CRC stored inside CRC'd data stays robust.
uint32_t masked_crc32c(const void* data, size_t size);

// "0x" + 8 lowercase hex digits, the spelling state.json uses.
std::string crc32c_hex(uint32_t crc);

// The CRC32C of a whole file, read in blocks. Throws std::runtime_error naming the file.
uint32_t crc32c_of_file(const std::string& path);

namespace detail {
// The table-driven implementation (always available); crc32c() uses hardware when it can. Exposed
// so that a test can check both give the same answer.
uint32_t crc32c_software(const void* data, size_t size, uint32_t crc);
bool crc32c_has_hardware();
}  // namespace detail

}  // namespace nmt
