// write_npz: a stored (uncompressed) ZIP of .npy entries, CRC-32 per entry, central directory at
// the end; written through a temporary file that is fsynced and renamed.
#include "engine/checkpoint/npz_writer.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <stdexcept>

#include "engine/checkpoint/checkpoint_files.h"

namespace nmt {
namespace {

constexpr uint64_t kZipLimit = std::numeric_limits<uint32_t>::max();  // without ZIP64
constexpr uint16_t kZipVersion = 20;                        // 2.0: what stored entries need
constexpr uint16_t kDosDate1980 = (0 << 9) | (1 << 5) | 1;  // 1980-01-01, the earliest ZIP date

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}

size_t itemsize(const std::string& dtype) {
  if (dtype == "<f4") return 4;
  if (dtype == "|i1") return 1;
  throw std::invalid_argument("write_npz: unsupported dtype '" + dtype + "' (use <f4 or |i1)");
}

uint64_t data_bytes(const NpyArray& a) {
  uint64_t n = itemsize(a.dtype);
  for (int64_t d : a.shape) {
    if (d < 0) throw std::invalid_argument("write_npz: " + a.name + " has a negative dimension");
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

// The .npy header of format 1.0, padded with spaces and a final '\n' so that the data starts at a
// multiple of 64 bytes (what NumPy itself writes).
std::string npy_header(const NpyArray& a) {
  std::string shape = "(";
  for (size_t i = 0; i < a.shape.size(); ++i)
    shape += std::to_string(a.shape[i]) + (a.shape.size() == 1      ? ","
                                           : i + 1 < a.shape.size() ? ", "
                                                                    : "");
  shape += ")";
  std::string dict =
      "{'descr': '" + a.dtype + "', 'fortran_order': False, 'shape': " + shape + ", }";
  const size_t prefix = 10;  // magic (6) + version (2) + header length (2)
  size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict += '\n';
  if (dict.size() > std::numeric_limits<uint16_t>::max())
    throw std::invalid_argument("write_npz: " + a.name + " has too many dimensions");
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xFF);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict;
}

void put16(std::string& s, uint32_t v) {
  s += static_cast<char>(v & 0xFF);
  s += static_cast<char>((v >> 8) & 0xFF);
}
void put32(std::string& s, uint32_t v) {
  put16(s, v & 0xFFFF);
  put16(s, v >> 16);
}

// The fields a local header and a central directory entry share, from "version needed" on.
std::string common_fields(uint32_t crc, uint32_t size, size_t name_size) {
  std::string s;
  put16(s, kZipVersion);
  put16(s, 0);  // flags
  put16(s, 0);  // method: stored
  put16(s, 0);  // time 00:00
  put16(s, kDosDate1980);
  put32(s, crc);
  put32(s, size);  // compressed size = size
  put32(s, size);
  put16(s, static_cast<uint32_t>(name_size));
  put16(s, 0);  // extra field length
  return s;
}

void check_name(const std::string& name, std::set<std::string>& seen) {
  if (name.empty() || name.size() > 1000 || name.find('/') != std::string::npos ||
      name.find('\\') != std::string::npos || name == "." || name == "..")
    throw std::invalid_argument("write_npz: unusable array name '" + name + "'");
  if (!seen.insert(name).second)
    throw std::invalid_argument("write_npz: duplicate array name '" + name + "'");
}

}  // namespace

uint32_t zip_crc32(const void* data, size_t size, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

std::string npy_bytes(const NpyArray& array) {
  std::string out = npy_header(array);
  out.append(static_cast<const char*>(array.data), data_bytes(array));
  return out;
}

void write_npz(const std::string& path, const std::vector<NpyArray>& arrays) {
  std::set<std::string> seen;
  std::vector<std::string> headers;
  std::vector<uint64_t> sizes;
  uint64_t total = 22;  // end of central directory
  for (const NpyArray& a : arrays) {
    check_name(a.name, seen);
    headers.push_back(npy_header(a));
    sizes.push_back(data_bytes(a));
    if (sizes.back() > 0 && !a.data)
      throw std::invalid_argument("write_npz: " + a.name + " has no data");
    uint64_t entry = headers.back().size() + sizes.back();
    if (entry > kZipLimit)
      throw std::invalid_argument("write_npz: " + a.name + " is over 4 GiB (ZIP64 not written)");
    total += entry + 2 * (a.name.size() + 4) + 30 + 46;
  }
  if (total > kZipLimit || arrays.size() > 0xFFFF)
    throw std::invalid_argument("write_npz: " + path +
                                " would be over 4 GiB or 65535 arrays (ZIP64 not written)");

  std::string temp = path + ".tmp-" + std::to_string(::getpid());
  try {
    DurableFile file(temp);
    std::string central;
    for (size_t i = 0; i < arrays.size(); ++i) {
      const NpyArray& a = arrays[i];
      std::string entry_name = a.name + ".npy";
      uint32_t crc = zip_crc32(headers[i].data(), headers[i].size());
      crc = zip_crc32(a.data, sizes[i], crc);
      auto size = static_cast<uint32_t>(headers[i].size() + sizes[i]);
      auto offset = static_cast<uint32_t>(file.bytes_written());
      std::string local;
      put32(local, 0x04034b50);
      local += common_fields(crc, size, entry_name.size()) + entry_name;
      file.write(local.data(), local.size());
      file.write(headers[i].data(), headers[i].size());
      file.write(a.data, sizes[i]);
      put32(central, 0x02014b50);
      put16(central, kZipVersion);  // made by
      central += common_fields(crc, size, entry_name.size());
      put16(central, 0);  // comment length
      put16(central, 0);  // disk number
      put16(central, 0);  // internal attributes
      put32(central, 0);  // external attributes
      put32(central, offset);
      central += entry_name;
    }
    auto central_offset = static_cast<uint32_t>(file.bytes_written());
    std::string end;
    put32(end, 0x06054b50);
    put16(end, 0);  // this disk
    put16(end, 0);  // disk of the central directory
    put16(end, static_cast<uint32_t>(arrays.size()));
    put16(end, static_cast<uint32_t>(arrays.size()));
    put32(end, static_cast<uint32_t>(central.size()));
    put32(end, central_offset);
    put16(end, 0);  // comment length
    file.write(central.data(), central.size());
    file.write(end.data(), end.size());
    file.sync_and_close();
    if (std::rename(temp.c_str(), path.c_str()) != 0)
      throw CheckpointError("cannot rename " + temp + " to " + path + ": " + std::strerror(errno));
  } catch (...) {
    ::unlink(temp.c_str());
    throw;
  }
  std::string parent = std::filesystem::path(path).parent_path().string();
  fsync_directory(parent.empty() ? "." : parent);
}

}  // namespace nmt
