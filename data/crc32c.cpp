// CRC32C: slicing-by-8 tables built at compile time, and the SSE4.2 crc32 instruction on x86-64
// (about 8 GB/s against about 2 GB/s: it keeps checksumming a multi-GB checkpoint short).
#include "data/crc32c.h"

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
#define NMT_CRC32C_X86 1
#endif

namespace nmt {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // Castagnoli, bit-reflected

using SliceTables = std::array<std::array<uint32_t, 256>, 8>;

constexpr SliceTables make_tables() {
  SliceTables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1;
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i)
    for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
  return t;
}

constexpr SliceTables kTables = make_tables();

uint64_t load_le64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);  // the engine targets little-endian hosts only
  return v;
}

#ifdef NMT_CRC32C_X86
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const unsigned char* p, size_t n,
                                                        uint32_t c) {
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) c64 = _mm_crc32_u64(c64, load_le64(p));
  c = static_cast<uint32_t>(c64);
  for (; n > 0; --n, ++p) c = _mm_crc32_u8(c, *p);
  return c;
}
#endif

// Both take and return the inverted register (the pre/post conditioning is done by the callers).
uint32_t crc32c_tables(const unsigned char* p, size_t n, uint32_t c) {
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word = load_le64(p) ^ c;
    c = kTables[7][word & 0xFF] ^ kTables[6][(word >> 8) & 0xFF] ^ kTables[5][(word >> 16) & 0xFF] ^
        kTables[4][(word >> 24) & 0xFF] ^ kTables[3][(word >> 32) & 0xFF] ^
        kTables[2][(word >> 40) & 0xFF] ^ kTables[1][(word >> 48) & 0xFF] ^ kTables[0][word >> 56];
  }
  for (; n > 0; --n, ++p) c = (c >> 8) ^ kTables[0][(c ^ *p) & 0xFF];
  return c;
}

}  // namespace

namespace detail {

uint32_t crc32c_software(const void* data, size_t size, uint32_t crc) {
  return ~crc32c_tables(static_cast<const unsigned char*>(data), size, ~crc);
}

bool crc32c_has_hardware() {
#ifdef NMT_CRC32C_X86
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
#else
  return false;
#endif
}

}  // namespace detail

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
#ifdef NMT_CRC32C_X86
  if (detail::crc32c_has_hardware())
    return ~crc32c_sse42(static_cast<const unsigned char*>(data), size, ~crc);
#endif
  return detail::crc32c_software(data, size, crc);
}

uint32_t masked_crc32c(const void* data, size_t size) {
  uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string crc32c_hex(uint32_t crc) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%08x", crc);
  return text;
}

uint32_t crc32c_of_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  std::vector<unsigned char> block(1 << 20);
  uint32_t crc = 0;
  size_t got = 0;
  while ((got = std::fread(block.data(), 1, block.size(), f)) > 0)
    crc = crc32c(block.data(), got, crc);
  bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) throw std::runtime_error("cannot read " + path);
  return crc;
}

}  // namespace nmt
