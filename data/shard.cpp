// Shard writing (streamed, atomic) and reading (memory-mapped, validated on open).
#include "data/shard.h"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace nmt {

// The on-disk format is little-endian and written with plain memcpy of native integers.
static_assert(std::endian::native == std::endian::little, "shards assume a little-endian host");

namespace {

uint64_t round_up_8(uint64_t n) {
  return (n + 7) / 8 * 8;
}

uint64_t header_checksum(const ShardHeader& h) {
  return fnv1a64(
      std::string_view(reinterpret_cast<const char*>(&h), offsetof(ShardHeader, header_checksum)));
}

uint32_t id_bytes_for(int64_t vocab_size) {
  return vocab_size <= kMaxVocabForUint16 ? 2 : 4;
}

}  // namespace

ShardWriter::ShardWriter(const std::string& path, int64_t vocab_size, uint64_t vocab_fingerprint)
    : out_(path),
      vocab_size_(vocab_size),
      vocab_fingerprint_(vocab_fingerprint),
      id_bytes_(id_bytes_for(vocab_size)),
      offsets_{0} {
  if (vocab_size <= 0 || vocab_size > (int64_t{1} << 31))
    throw std::invalid_argument("shard " + path + ": invalid vocabulary size " +
                                std::to_string(vocab_size));
  const ShardHeader placeholder{};  // the real header is written by finish()
  out_.write(&placeholder, sizeof(placeholder));
}

void ShardWriter::add(std::span<const int32_t> ids) {
  staging_.resize(ids.size() * id_bytes_);
  char* dst = staging_.data();
  for (size_t j = 0; j < ids.size(); ++j) {
    const int32_t id = ids[j];
    if (id < 0 || id >= vocab_size_) {
      throw std::invalid_argument("shard " + out_.path() + ": id " + std::to_string(id) +
                                  " in sentence " + std::to_string(sentences()) +
                                  " is outside the vocabulary of " + std::to_string(vocab_size_));
    }
    if (id_bytes_ == 2) {
      const auto narrow = static_cast<uint16_t>(id);
      std::memcpy(dst + 2 * j, &narrow, 2);
    } else {
      const auto wide = static_cast<uint32_t>(id);
      std::memcpy(dst + 4 * j, &wide, 4);
    }
  }
  out_.write(staging_.data(), staging_.size());
  offsets_.push_back(offsets_.back() + ids.size());
}

uint64_t ShardWriter::finish() {
  const uint64_t ids_end = kShardHeaderBytes + offsets_.back() * id_bytes_;
  const uint64_t offsets_position = round_up_8(ids_end);
  const char zeros[8] = {};
  out_.write(zeros, offsets_position - ids_end);
  out_.write(offsets_.data(), offsets_.size() * sizeof(uint64_t));

  ShardHeader h{};
  std::memcpy(h.magic, kShardMagic, sizeof(h.magic));
  h.version = kShardVersion;
  h.id_bytes = id_bytes_;
  h.vocab_size = static_cast<uint64_t>(vocab_size_);
  h.sentence_count = offsets_.size() - 1;
  h.token_count = offsets_.back();
  h.vocab_fingerprint = vocab_fingerprint_;
  h.offsets_position = offsets_position;
  h.header_checksum = header_checksum(h);
  out_.write_at(0, &h, sizeof(h));
  const uint64_t bytes = out_.bytes_written();
  out_.commit();
  return bytes;
}

Shard::Shard(const std::string& path, bool check_ids) : file_(path) {
  validate(check_ids);
}

void Shard::validate(bool check_ids) {
  const std::string& name = file_.path();
  const uint64_t size = file_.size();
  auto fail = [&](const std::string& why) {
    throw std::runtime_error("shard " + name + ": " + why);
  };
  if (size < sizeof(kShardMagic) || std::memcmp(file_.data(), kShardMagic, 8) != 0)
    fail("not an nmt token shard (bad magic; expected a file written by nmt-prep)");
  if (size < kShardHeaderBytes)
    fail("truncated: " + std::to_string(size) + " bytes, smaller than the 64-byte header");
  std::memcpy(&header_, file_.data(), sizeof(header_));
  if (header_.version != kShardVersion)
    fail("format version " + std::to_string(header_.version) +
         " is not supported (this build "
         "reads version " +
         std::to_string(kShardVersion) + "; re-run nmt-prep)");
  if (header_.header_checksum != header_checksum(header_))
    fail("corrupt header (checksum mismatch)");
  if (header_.vocab_size == 0 || header_.vocab_size > (uint64_t{1} << 31) ||
      header_.id_bytes != id_bytes_for(static_cast<int64_t>(header_.vocab_size)))
    fail("corrupt header (id width " + std::to_string(header_.id_bytes) +
         " does not match vocabulary size " + std::to_string(header_.vocab_size) + ")");
  const uint64_t n = header_.sentence_count;
  const uint64_t tokens = header_.token_count;
  // Bounds keep the size arithmetic below from overflowing on a crafted header.
  if (n > (uint64_t{1} << 56) || tokens > (uint64_t{1} << 56)) fail("corrupt header (counts)");
  const uint64_t expected_offsets = round_up_8(kShardHeaderBytes + tokens * header_.id_bytes);
  if (header_.offsets_position != expected_offsets) fail("corrupt header (offsets position)");
  const uint64_t expected_size = expected_offsets + (n + 1) * sizeof(uint64_t);
  if (size < expected_size)
    fail("truncated: the header describes " + std::to_string(expected_size) +
         " bytes but the file has " + std::to_string(size));
  if (size > expected_size)
    fail("trailing data: the header describes " + std::to_string(expected_size) +
         " bytes but the file has " + std::to_string(size));

  ids_ = file_.data() + kShardHeaderBytes;
  offsets_ = reinterpret_cast<const uint64_t*>(file_.data() + expected_offsets);
  if (offsets_[0] != 0 || offsets_[n] != tokens) fail("corrupt offsets (first or last entry)");
  for (uint64_t i = 0; i < n; ++i) {
    if (offsets_[i + 1] < offsets_[i] || offsets_[i + 1] - offsets_[i] > INT32_MAX)
      fail("corrupt offsets at sentence " + std::to_string(i));
  }
  if (!check_ids) return;
  uint32_t max_id = 0;
  if (header_.id_bytes == 2) {
    const auto* p = reinterpret_cast<const uint16_t*>(ids_);
    for (uint64_t j = 0; j < tokens; ++j) max_id = std::max<uint32_t>(max_id, p[j]);
  } else {
    const auto* p = reinterpret_cast<const uint32_t*>(ids_);
    for (uint64_t j = 0; j < tokens; ++j) max_id = std::max(max_id, p[j]);
  }
  if (tokens > 0 && max_id >= header_.vocab_size)
    fail("corrupt ids (id " + std::to_string(max_id) + " >= vocabulary size " +
         std::to_string(header_.vocab_size) + ")");
}

void Shard::sentence(int64_t i, std::vector<int32_t>& ids) const {
  if (i < 0 || i >= sentences())
    throw std::out_of_range("shard " + path() + ": sentence " + std::to_string(i) +
                            " out of range (" + std::to_string(sentences()) + " sentences)");
  const uint64_t begin = offsets_[i];
  const uint64_t count = offsets_[i + 1] - begin;
  ids.resize(count);
  if (header_.id_bytes == 2) {
    const auto* p = reinterpret_cast<const uint16_t*>(ids_) + begin;
    for (uint64_t j = 0; j < count; ++j) ids[j] = p[j];
  } else {
    const auto* p = reinterpret_cast<const uint32_t*>(ids_) + begin;
    for (uint64_t j = 0; j < count; ++j) ids[j] = static_cast<int32_t>(p[j]);
  }
}

ShardCorpus::ShardCorpus(const std::string& source_path, const std::string& target_path,
                         bool check_ids)
    : source_(source_path, check_ids), target_(target_path, check_ids) {
  if (source_.sentences() != target_.sentences())
    throw std::runtime_error("misaligned shards: " + source_path + " has " +
                             std::to_string(source_.sentences()) + " sentences but " + target_path +
                             " has " + std::to_string(target_.sentences()));
  if (source_.vocab_size() != target_.vocab_size() ||
      source_.vocab_fingerprint() != target_.vocab_fingerprint())
    throw std::runtime_error("shards " + source_path + " and " + target_path +
                             " were encoded with different vocabularies");
}

}  // namespace nmt
