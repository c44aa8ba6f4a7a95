// Protocol buffer wire format by hand, for the TensorBoard event files
// (engine/report/tensorboard*): a field is a varint key (field number << 3 | wire type) then a
// varint, 8 or 4 little-endian bytes, or a varint length and that many bytes (strings, bytes and
// sub-messages alike). We write every field we are given, defaults included: a member of a oneof
// (google.protobuf.Value's number_value 0, bool_value false) must be present to be read back as
// set.
#pragma once

#include <bit>
#include <cstdint>
#include <string>

namespace nmt::protobuf_wire {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

inline void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

inline void put_key(std::string& out, uint32_t field, WireType type) {
  put_varint(out, (field << 3) | type);
}

// A varint field: int32/int64 (negative values take ten bytes), bool, enum.
inline void put_varint_field(std::string& out, uint32_t field, uint64_t v) {
  put_key(out, field, kVarint);
  put_varint(out, v);
}

inline void put_le64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

inline void put_le32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

inline void put_double(std::string& out, uint32_t field, double v) {
  put_key(out, field, kFixed64);
  put_le64(out, std::bit_cast<uint64_t>(v));
}

inline void put_float(std::string& out, uint32_t field, float v) {
  put_key(out, field, kFixed32);
  put_le32(out, std::bit_cast<uint32_t>(v));
}

// A string, bytes or an encoded sub-message.
inline void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

}  // namespace nmt::protobuf_wire
