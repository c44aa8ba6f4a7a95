// Transformer's inputs: the batch's ids and lengths, the embeddings' row orders and the step
// number, in one arena region; a GPU training step uploads them from a pinned mirror of it.
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/host_copy.h"
#include "engine/model/transformer.h"

namespace nmt {
namespace {

// A step number as the two i32 words of step_ (StepContext::step_on_device reads them as a u64).
std::vector<int32_t> step_words(uint64_t step) {
  static_assert(sizeof(uint64_t) == 2 * sizeof(int32_t));
  return {static_cast<int32_t>(static_cast<uint32_t>(step)),
          static_cast<int32_t>(static_cast<uint32_t>(step >> 32))};
}

}  // namespace

void Transformer::allocate_inputs(Arena& arena) {
  const int64_t rows = max_rows_;
  // The inputs in one region, each part 256-byte aligned; the embeddings' row orders only where a
  // GPU's backward reads them.
  const bool gpu_training = plan_.training && arena.device() == Device::cuda;
  const std::vector<std::pair<Buffer*, int64_t>> parts = {
      {&src_ids_, rows},
      {&tgt_in_, rows},
      {&tgt_out_, rows},
      {&src_lengths_, rows},
      {&tgt_lengths_, rows},
      {&step_, 2},
      {&row_orders_buffer_, gpu_training ? 4 * rows : 0}};
  constexpr int64_t kPartAlign = 64;  // i32 elements: 256 bytes
  auto padded = [](int64_t elements) {
    return (elements + kPartAlign - 1) / kPartAlign * kPartAlign;
  };
  int64_t total = 0;
  for (const auto& part : parts) total += padded(part.second);
  inputs_ = arena.allocate("inputs", DType::i32, total);
  int64_t at = 0;
  for (const auto& [buffer, elements] : parts) {
    *buffer = inputs_;
    buffer->data = inputs_.data ? static_cast<int32_t*>(inputs_.data) + at : nullptr;
    buffer->capacity = elements;
    at += padded(elements);
  }
  src_ids_.name = "src_ids", tgt_in_.name = "tgt_in", tgt_out_.name = "tgt_out";
  src_lengths_.name = "src_lengths", tgt_lengths_.name = "tgt_lengths", step_.name = "step";
  row_orders_buffer_.name = "row_orders";
  if (gpu_training && !arena.planning())
    staging_ = std::make_unique<cuda::UploadStaging>(static_cast<size_t>(total) * sizeof(int32_t));
}

void Transformer::upload(const Batch& batch) {
  take_shape(batch);
  upload_i32(batch.src, src_ids_);
  upload_i32(batch.tgt_in, tgt_in_);
  upload_i32(batch.tgt_out, tgt_out_);
  upload_i32(batch.src_lengths, src_lengths_);
  upload_i32(batch.tgt_lengths, tgt_lengths_);
}

StepContext Transformer::upload_step(const Batch& batch, const StepContext& ctx) {
  if (!staging_) {  // the CPU's arena is host memory
    upload(batch);
    upload_row_orders(batch);
    return with_step_on_device(ctx);
  }
  take_shape(batch);
  char* host = static_cast<char*>(staging_->begin());
  auto put = [&](const Buffer& dst, const std::vector<int32_t>& values, int64_t first) {
    const int64_t count = static_cast<int64_t>(values.size());
    if (first + count > dst.capacity)
      throw std::invalid_argument(dst.name + ": " + std::to_string(first + count) +
                                  " elements exceed its capacity " + std::to_string(dst.capacity));
    const size_t offset = static_cast<size_t>(static_cast<const char*>(dst.data) -
                                              static_cast<const char*>(inputs_.data)) +
                          static_cast<size_t>(first) * sizeof(int32_t);
    const size_t bytes = static_cast<size_t>(count) * sizeof(int32_t);
    if (bytes > 0) std::memcpy(host + offset, values.data(), bytes);
    staging_->copy(offset, static_cast<char*>(inputs_.data) + offset, bytes);
  };
  put(src_ids_, batch.src, 0);
  put(tgt_in_, batch.tgt_in, 0);
  put(tgt_out_, batch.tgt_out, 0);
  put(src_lengths_, batch.src_lengths, 0);
  put(tgt_lengths_, batch.tgt_lengths, 0);
  if (take_row_orders(batch)) {
    put(row_orders_buffer_, batch.src_order, 0);
    put(row_orders_buffer_, batch.tgt_order, 2 * batch_ * src_len_);
  }
  put(step_, step_words(ctx.step), 0);
  staging_->end();
  return on_device_step(ctx);
}

void Transformer::take_shape(const Batch& batch) {
  int64_t b = batch.sentences;
  if (b * batch.src_len > max_rows_ || b * batch.tgt_len > max_rows_ || batch.src_len > max_len_ ||
      batch.tgt_len > max_len_)
    throw std::invalid_argument(
        "batch of " + std::to_string(b) + " sentences x (" + std::to_string(batch.src_len) + ", " +
        std::to_string(batch.tgt_len) + ") tokens exceeds the planned maximum (" +
        std::to_string(max_rows_) + " rows, length " + std::to_string(max_len_) + ")");
  batch_ = b;
  src_len_ = batch.src_len;
  tgt_len_ = batch.tgt_len;
}

StepContext Transformer::with_step_on_device(const StepContext& ctx) {
  if (device_ != Device::cuda) return ctx;
  upload_i32(step_words(ctx.step), step_);
  return on_device_step(ctx);
}

StepContext Transformer::on_device_step(const StepContext& ctx) const {
  StepContext on_device = ctx;
  on_device.step_on_device = static_cast<const uint64_t*>(step_.data);
  return on_device;
}

}  // namespace nmt
