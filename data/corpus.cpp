// InMemoryCorpus.
#include "data/corpus.h"

#include <stdexcept>
#include <string>

namespace nmt {

InMemoryCorpus::InMemoryCorpus(std::vector<std::vector<int32_t>> sources,
                               std::vector<std::vector<int32_t>> targets)
    : sources_(std::move(sources)), targets_(std::move(targets)) {
  if (sources_.size() != targets_.size()) {
    throw std::invalid_argument("InMemoryCorpus: " + std::to_string(sources_.size()) +
                                " sources but " + std::to_string(targets_.size()) + " targets");
  }
}

void InMemoryCorpus::add(std::vector<int32_t> source, std::vector<int32_t> target) {
  sources_.push_back(std::move(source));
  targets_.push_back(std::move(target));
}

int32_t InMemoryCorpus::source_length(int64_t i) const {
  return static_cast<int32_t>(sources_.at(i).size());
}

int32_t InMemoryCorpus::target_length(int64_t i) const {
  return static_cast<int32_t>(targets_.at(i).size());
}

}  // namespace nmt
