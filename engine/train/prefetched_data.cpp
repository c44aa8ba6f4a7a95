// PrefetchedData: one std::async task per batch builds the next one. Only next_train() starts a
// task, and every other use of the inner source first waits for the running one, so the inner
// source is never used from two threads at once.
#include "engine/train/prefetched_data.h"

#include <system_error>
#include <utility>

namespace nmt {

PrefetchedData::PrefetchedData(std::unique_ptr<TrainingData> inner) : inner_(std::move(inner)) {}

PrefetchedData::~PrefetchedData() {
  if (ahead_.valid()) ahead_.wait();  // wait() leaves a stored exception where it is
}

PrefetchedData::Prepared PrefetchedData::prepare(TrainingData& inner) {
  Prepared p;
  p.batch = inner.next_train();
  p.state = {inner.last_global_tgt_tokens(), inner.epoch(), inner.position()};
  return p;
}

const TrainingData& PrefetchedData::settled() const {
  if (ahead_.valid()) ahead_.wait();
  return *inner_;
}

Batch PrefetchedData::next_train() {
  // get() throws what the task threw, and leaves ahead_ empty either way: after a throw the next
  // call builds its batch here, as the inner source alone would be asked again.
  Prepared p = ahead_.valid() ? ahead_.get() : prepare(*inner_);
  // Where no thread can be started for the next batch, that call builds it in place: this batch
  // is handed out either way, so the stream skips nothing.
  std::future<Prepared> next;
  try {
    next = std::async(std::launch::async, [inner = inner_.get()] { return prepare(*inner); });
  } catch (const std::system_error&) {
  }
  handed_ = std::move(p.state);
  ahead_ = std::move(next);
  return std::move(p.batch);
}

int64_t PrefetchedData::last_global_tgt_tokens() const {
  return handed_ ? handed_->global_tgt_tokens : settled().last_global_tgt_tokens();
}

int64_t PrefetchedData::epoch() const {
  return handed_ ? handed_->epoch : settled().epoch();
}

nlohmann::json PrefetchedData::position() const {
  return handed_ ? handed_->position : settled().position();
}

void PrefetchedData::restore(const nlohmann::json& position) {
  if (ahead_.valid()) ahead_.wait();
  ahead_ = {};  // its batch or exception belongs to the stream being left
  handed_.reset();
  inner_->restore(position);
}

int64_t PrefetchedData::vocab_size() const {
  return settled().vocab_size();
}
int64_t PrefetchedData::max_padded_len() const {
  return settled().max_padded_len();
}
int64_t PrefetchedData::dev_pairs() const {
  return settled().dev_pairs();
}
void PrefetchedData::dev_pair(int64_t i, std::vector<int32_t>& source,
                              std::vector<int32_t>& target) const {
  settled().dev_pair(i, source, target);
}
const Vocab* PrefetchedData::vocab() const {
  return settled().vocab();
}
const std::vector<std::string>& PrefetchedData::dev_references() const {
  return settled().dev_references();
}
const std::vector<std::string>& PrefetchedData::dev_sources_text() const {
  return settled().dev_sources_text();
}
std::string PrefetchedData::describe() const {
  return settled().describe();
}

}  // namespace nmt
