// ParallelCorpus: the read-only view of paired source/target id sequences that batchers consume
// (backed by two shards, or by memory for tests and small inputs).
#pragma once

#include <cstdint>
#include <vector>

namespace nmt {

// Sentence pair i has a source and a target id sequence (no bos/eos in them, ids < vocab size).
class ParallelCorpus {
 public:
  virtual ~ParallelCorpus() = default;
  virtual int64_t size() const = 0;
  virtual int32_t source_length(int64_t i) const = 0;
  virtual int32_t target_length(int64_t i) const = 0;
  // Replaces `ids` with the ids of sentence i (the vector keeps its capacity between calls).
  virtual void source(int64_t i, std::vector<int32_t>& ids) const = 0;
  virtual void target(int64_t i, std::vector<int32_t>& ids) const = 0;
};

// A corpus held in vectors.
class InMemoryCorpus : public ParallelCorpus {
 public:
  InMemoryCorpus() = default;
  // sources[i] and targets[i] form pair i; the two lists must have the same length.
  InMemoryCorpus(std::vector<std::vector<int32_t>> sources,
                 std::vector<std::vector<int32_t>> targets);
  void add(std::vector<int32_t> source, std::vector<int32_t> target);

  int64_t size() const override { return static_cast<int64_t>(sources_.size()); }
  int32_t source_length(int64_t i) const override;
  int32_t target_length(int64_t i) const override;
  void source(int64_t i, std::vector<int32_t>& ids) const override { ids = sources_.at(i); }
  void target(int64_t i, std::vector<int32_t>& ids) const override { ids = targets_.at(i); }

 private:
  std::vector<std::vector<int32_t>> sources_;
  std::vector<std::vector<int32_t>> targets_;
};

}  // namespace nmt
