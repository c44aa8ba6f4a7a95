// Token shards: the binary file nmt-prep writes per split and side (train.src.shard, ...), read
// back through a memory map and validated on open. The format is described in docs/data.md.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "data/corpus_io.h"

namespace nmt {

inline constexpr char kShardMagic[8] = {'N', 'M', 'T', 'S', 'H', 'A', 'R', 'D'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr uint64_t kShardHeaderBytes = 64;
// Ids are stored as uint16 up to this vocabulary size, as uint32 above it.
inline constexpr int64_t kMaxVocabForUint16 = 65535;

// The 64-byte header at the start of a shard, little-endian.
struct ShardHeader {
  char magic[8];               // "NMTSHARD"
  uint32_t version;            // kShardVersion
  uint32_t id_bytes;           // 2 (uint16 ids) or 4 (uint32 ids)
  uint64_t vocab_size;         // every id is < vocab_size
  uint64_t sentence_count;     // N
  uint64_t token_count;        // total ids over all sentences
  uint64_t vocab_fingerprint;  // Vocab::fingerprint() of the vocabulary that produced the ids
  uint64_t offsets_position;   // byte position of the offsets array (after the ids, 8-aligned)
  uint64_t header_checksum;    // FNV-1a of the 56 bytes before this field
};
static_assert(sizeof(ShardHeader) == kShardHeaderBytes);

// Streams sentences into a new shard; the file appears under its name only at finish().
class ShardWriter {
 public:
  ShardWriter(const std::string& path, int64_t vocab_size, uint64_t vocab_fingerprint);
  // Appends one sentence; throws when an id is outside [0, vocab_size).
  void add(std::span<const int32_t> ids);  // [length] token ids
  // Writes offsets and header, fsyncs, renames; returns the file size in bytes.
  uint64_t finish();
  int64_t sentences() const { return static_cast<int64_t>(offsets_.size()) - 1; }
  int64_t tokens() const { return static_cast<int64_t>(offsets_.back()); }

 private:
  AtomicFileWriter out_;
  int64_t vocab_size_;
  uint64_t vocab_fingerprint_;
  uint32_t id_bytes_;
  std::vector<uint64_t> offsets_;  // [N + 1] start of each sentence in tokens
  std::vector<char> staging_;      // one sentence converted to the on-disk id width
};

// A shard opened read-only. Opening checks magic, version, header checksum, file size, offsets and
// (unless check_ids is false) that every id is below the vocabulary size; any failure throws
// std::runtime_error naming the file.
class Shard {
 public:
  explicit Shard(const std::string& path, bool check_ids = true);

  const std::string& path() const { return file_.path(); }
  const ShardHeader& header() const { return header_; }
  int64_t sentences() const { return static_cast<int64_t>(header_.sentence_count); }
  int64_t tokens() const { return static_cast<int64_t>(header_.token_count); }
  int64_t vocab_size() const { return static_cast<int64_t>(header_.vocab_size); }
  uint64_t vocab_fingerprint() const { return header_.vocab_fingerprint; }
  uint64_t file_bytes() const { return file_.size(); }

  int32_t length(int64_t i) const { return static_cast<int32_t>(offsets_[i + 1] - offsets_[i]); }
  // Replaces `ids` with sentence i.
  void sentence(int64_t i, std::vector<int32_t>& ids) const;

 private:
  void validate(bool check_ids);
  MappedFile file_;
  ShardHeader header_{};
  const uint64_t* offsets_ = nullptr;  // [N + 1] inside the mapping
  const char* ids_ = nullptr;          // [token_count] ids of id_bytes each, inside the mapping
};

// Two shards of one split (source side, target side) as a ParallelCorpus. Throws when their
// sentence counts, vocabulary sizes or vocabulary fingerprints differ.
class ShardCorpus : public ParallelCorpus {
 public:
  ShardCorpus(const std::string& source_path, const std::string& target_path,
              bool check_ids = true);

  int64_t size() const override { return source_.sentences(); }
  int32_t source_length(int64_t i) const override { return source_.length(i); }
  int32_t target_length(int64_t i) const override { return target_.length(i); }
  void source(int64_t i, std::vector<int32_t>& ids) const override { source_.sentence(i, ids); }
  void target(int64_t i, std::vector<int32_t>& ids) const override { target_.sentence(i, ids); }

  const Shard& source_shard() const { return source_; }
  const Shard& target_shard() const { return target_; }

 private:
  Shard source_;
  Shard target_;
};

}  // namespace nmt
