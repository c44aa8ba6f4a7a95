// safetensors writer and validating reader.
#include "engine/checkpoint/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "data/crc32c.h"
#include "engine/config/json_limits.h"

namespace nmt {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this reader copies bytes as they are");

namespace {

// The reference implementation refuses headers above 100 MB; so do we (a corrupt size field
// would otherwise ask for gigabytes of JSON).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// Element sizes of the dtypes the format defines (sub-byte types are not supported).
int dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, int> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

uint64_t byte_count(const std::vector<int64_t>& shape, int element_bytes, bool& overflow) {
  uint64_t n = static_cast<uint64_t>(element_bytes);
  overflow = false;
  for (int64_t d : shape) overflow |= __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n);
  return n;
}

}  // namespace

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t SafetensorsTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFileInfo write_safetensors(const std::string& path,
                                      const std::vector<SafetensorsTensor>& tensors,
                                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !names.insert(t.name).second)
      throw std::invalid_argument("write_safetensors " + path + ": tensor name '" + t.name +
                                  "' is empty, reserved or given twice");
    bool overflow = false;
    uint64_t bytes = byte_count(t.shape, 4, overflow);
    if (overflow || std::any_of(t.shape.begin(), t.shape.end(), [](int64_t d) { return d < 0; }))
      throw std::invalid_argument("write_safetensors " + path + ": tensor '" + t.name +
                                  "' has an invalid shape " + shape_to_string(t.shape));
    if (bytes > 0 && t.data == nullptr)
      throw std::invalid_argument("write_safetensors " + path + ": tensor '" + t.name +
                                  "' has no data");
    header[t.name] = {
        {"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  // Pad so that the data section starts 8-byte aligned (8 + N is a multiple of 8).
  text.append((8 - text.size() % 8) % 8, ' ');
  uint64_t header_size = text.size();

  std::string temp = path + ".tmp-" + std::to_string(::getpid());
  SafetensorsFileInfo info;
  try {
    DurableFile file(temp);
    unsigned char size_field[8];
    for (int i = 0; i < 8; ++i) size_field[i] = static_cast<unsigned char>(header_size >> (8 * i));
    file.write(size_field, sizeof(size_field));
    file.write(text.data(), text.size());
    for (const SafetensorsTensor& t : tensors) {
      bool overflow = false;
      file.write(t.data, byte_count(t.shape, 4, overflow));
    }
    file.sync_and_close();
    info.bytes = file.bytes_written();
    info.crc32c = file.crc32c();
    if (std::rename(temp.c_str(), path.c_str()) != 0)
      throw CheckpointError("cannot rename " + temp + " to " + path + ": " + std::strerror(errno));
  } catch (...) {
    std::remove(temp.c_str());
    throw;
  }
  std::string parent = std::filesystem::path(path).parent_path().string();
  fsync_directory(parent.empty() ? "." : parent);
  return info;
}

namespace {

// The file mapped, its failures (missing, unreadable, not a regular file) as CheckpointError.
MappedFile map_checkpoint(const std::string& path) {
  try {
    return MappedFile(path);
  } catch (const std::runtime_error& e) {
    throw CheckpointError(e.what());
  }
}

}  // namespace

SafetensorsReader::SafetensorsReader(const std::string& path) : file_(map_checkpoint(path)) {
  if (file_.size() < 8)
    fail("file too short to be safetensors (" + std::to_string(file_.size()) +
         " bytes; the header size alone takes 8)");
  uint64_t header_size = 0;
  for (int i = 0; i < 8; ++i) header_size |= static_cast<uint64_t>(bytes()[i]) << (8 * i);
  if (header_size > file_.size() - 8)
    fail("header size " + std::to_string(header_size) + " is beyond the end of the file (" +
         std::to_string(file_.size()) + " bytes): truncated or not safetensors");
  if (header_size > kMaxHeaderBytes)
    fail("header size " + std::to_string(header_size) + " exceeds the 100 MB limit");
  data_start_ = 8 + header_size;
  parse_header(header_size);
  check_layout(file_.size() - data_start_);
}

void SafetensorsReader::fail(const std::string& what) const {
  throw SafetensorsError(file_.path() + ": " + what);
}

void SafetensorsReader::parse_header(uint64_t header_size) {
  const char* text = file_.data() + 8;
  nlohmann::json header;
  try {
    header = parse_json_bounded(std::string_view(text, header_size), "header");
  } catch (const JsonTooDeep& e) {
    fail(e.what());
  }
  if (header.is_discarded()) fail("header is not valid JSON");
  if (!header.is_object()) fail("header is not a JSON object");
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) fail("__metadata__ is not an object");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string()) fail("__metadata__ value '" + m.key() + "' is not a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    std::string where = "tensor '" + name + "': ";
    if (!entry.is_object()) fail(where + "entry is not an object");
    if (!entry.contains("dtype") || !entry["dtype"].is_string()) fail(where + "no dtype string");
    if (!entry.contains("shape") || !entry["shape"].is_array()) fail(where + "no shape array");
    if (!entry.contains("data_offsets") || !entry["data_offsets"].is_array() ||
        entry["data_offsets"].size() != 2 || !entry["data_offsets"][0].is_number_unsigned() ||
        !entry["data_offsets"][1].is_number_unsigned())
      fail(where + "data_offsets is not a pair of non-negative integers");
    SafetensorsTensorInfo info;
    info.name = name;
    info.dtype = entry["dtype"].get<std::string>();
    for (const nlohmann::json& d : entry["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t{INT64_MAX})
        fail(where + "shape " + entry["shape"].dump() + " has a dimension that is not a size");
      info.shape.push_back(d.get<int64_t>());
    }
    info.begin = entry["data_offsets"][0].get<uint64_t>();
    info.end = entry["data_offsets"][1].get<uint64_t>();
    int element_bytes = dtype_bytes(info.dtype);
    if (element_bytes == 0) fail(where + "unknown dtype '" + info.dtype + "'");
    if (info.end < info.begin)
      fail(where + "data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) +
           "] end before they begin");
    bool overflow = false;
    uint64_t expected = byte_count(info.shape, element_bytes, overflow);
    if (overflow || expected != info.end - info.begin)
      fail(where + "shape " + shape_to_string(info.shape) + " " + info.dtype + " needs " +
           (overflow ? std::string("more than 2^64") : std::to_string(expected)) +
           " bytes but data_offsets span " + std::to_string(info.end - info.begin));
    tensors_.push_back(std::move(info));
  }
}

void SafetensorsReader::check_layout(uint64_t data_size) {
  std::sort(tensors_.begin(), tensors_.end(),
            [](const SafetensorsTensorInfo& a, const SafetensorsTensorInfo& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  uint64_t expected_begin = 0;
  const SafetensorsTensorInfo* previous = nullptr;
  for (const SafetensorsTensorInfo& t : tensors_) {
    if (t.end > data_size)
      fail("tensor '" + t.name + "': data_offsets [" + std::to_string(t.begin) + ", " +
           std::to_string(t.end) + "] lie beyond the " + std::to_string(data_size) +
           " data bytes in the file: truncated or corrupt");
    if (t.begin < expected_begin)
      fail("tensors '" + previous->name + "' and '" + t.name + "' overlap");
    if (t.begin > expected_begin)
      fail("a gap of " + std::to_string(t.begin - expected_begin) + " bytes precedes tensor '" +
           t.name + "'");
    expected_begin = t.end;
    previous = &t;
  }
  if (expected_begin != data_size)
    fail(std::to_string(data_size - expected_begin) + " bytes follow the last tensor");
}

const SafetensorsTensorInfo* SafetensorsReader::find(std::string_view name) const {
  for (const SafetensorsTensorInfo& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const unsigned char* SafetensorsReader::data(const SafetensorsTensorInfo& tensor) const {
  return bytes() + data_start_ + tensor.begin;
}

void SafetensorsReader::read_f32(const std::string& name,
                                 const std::vector<int64_t>& expected_shape, float* out) const {
  const SafetensorsTensorInfo* t = find(name);
  if (!t) fail("no tensor '" + name + "'");
  if (t->dtype != "F32") fail("tensor '" + name + "' is " + t->dtype + ", expected F32");
  if (t->shape != expected_shape)
    fail("tensor '" + name + "' has shape " + shape_to_string(t->shape) + ", expected " +
         shape_to_string(expected_shape));
  if (t->end > t->begin) std::memcpy(out, data(*t), t->end - t->begin);
}

uint32_t SafetensorsReader::file_crc32c() const {
  return crc32c(bytes(), file_.size());
}

}  // namespace nmt
