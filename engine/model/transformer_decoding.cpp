// Transformer's decoding entry points (declared in engine/model/transformer.h): the encoder alone,
// one decoder pass over given prefixes that returns the last position's logits, and one position
// per row over key/value caches. They reuse the graph's own buffers and its decoder layers.
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/model/host_copy.h"
#include "engine/model/transformer.h"
#include "kernels/decode_ops.h"
#include "kernels/elementwise.h"
#include "kernels/linear.h"
#include "kernels/op_checks.h"

namespace nmt {

namespace {

std::string plan_text(int64_t max_rows, int64_t max_len) {
  return " exceeds the planned maximum (" + std::to_string(max_rows) + " rows, length " +
         std::to_string(max_len) + ")";
}

void check_layer_caches(size_t caches, size_t layers) {
  if (caches != layers)
    throw std::invalid_argument("decode step: " + std::to_string(caches) + " layer caches for " +
                                std::to_string(layers) + " decoder layers");
}

}  // namespace

Tensor Transformer::encode_sources(const Batch& batch) {
  int64_t b = batch.sentences;
  if (b < 1 || b * batch.src_len > max_rows_ || batch.src_len > max_len_)
    throw std::invalid_argument("encode: " + std::to_string(b) + " sources of padded length " +
                                std::to_string(batch.src_len) + plan_text(max_rows_, max_len_));
  if (static_cast<int64_t>(batch.src.size()) != b * batch.src_len ||
      static_cast<int64_t>(batch.src_lengths.size()) != b)
    throw std::invalid_argument("encode: batch source ids or lengths do not match its shape");
  batch_ = b;
  src_len_ = batch.src_len;
  tgt_len_ = 0;
  upload_i32(batch.src, src_ids_);
  upload_i32(batch.src_lengths, src_lengths_);
  StepContext ctx;
  ctx.training = false;
  return encode(ctx);
}

Tensor Transformer::decode_last_logits(const Tensor& memory,
                                       const std::vector<int32_t>& memory_lengths,
                                       int64_t memory_len, const std::vector<int32_t>& prefixes,
                                       int64_t rows, int64_t prefix_len) {
  int64_t d = shape_.d_model, v = shape_.vocab;
  if (rows < 1 || prefix_len < 1 || rows * prefix_len > max_rows_ ||
      rows * memory_len > max_rows_ || prefix_len > max_len_ || memory_len > max_len_)
    throw std::invalid_argument("decode step: " + std::to_string(rows) + " prefixes of length " +
                                std::to_string(prefix_len) + " over sources of length " +
                                std::to_string(memory_len) + plan_text(max_rows_, max_len_));
  if (static_cast<int64_t>(prefixes.size()) != rows * prefix_len ||
      static_cast<int64_t>(memory_lengths.size()) != rows)
    throw std::invalid_argument("decode step: prefix ids or source lengths do not match rows");
  check_shape("decode step", "memory", memory, {rows * memory_len, d});
  batch_ = rows;
  src_len_ = memory_len;
  tgt_len_ = prefix_len;
  embed_p_ = 0;  // decode() reads the embedding dropout rate the last encode() left
  upload_i32(memory_lengths, src_lengths_);
  upload_i32(prefixes, tgt_in_);
  upload_i32(std::vector<int32_t>(rows, static_cast<int32_t>(prefix_len)), tgt_lengths_);
  StepContext ctx;
  ctx.training = false;
  Tensor dec_out = decode(memory, ctx);  // [rows * prefix_len, d_model]
  // Gather each prefix's last position, then project only those rows (as every decoding path does).
  Tensor last = ws_.s2.view({rows, d});
  for (int64_t r = 0; r < rows; ++r) {
    Tensor row = dec_out.rows((r + 1) * prefix_len - 1, (r + 1) * prefix_len);
    Tensor dst = last.rows(r, r + 1);
    copy_tensor(row, dst);
  }
  Tensor logits = logits_.view({rows, v});
  Tensor no_bias;
  linear_forward(last, out_proj_->compute, no_bias, logits);
  return logits;
}

void Transformer::cache_sources(const Tensor& memory, std::vector<DecoderLayerCache>& caches) {
  check_layer_caches(caches.size(), decoder_.size());
  for (size_t i = 0; i < decoder_.size(); ++i) decoder_[i]->cache_source(memory, caches[i]);
}

Tensor Transformer::decode_step(const Tensor& ids, const Tensor& positions,
                                std::vector<DecoderLayerCache>& caches) {
  const int64_t rows = ids.numel(), d = shape_.d_model;
  if (rows < 1 || rows > max_rows_)
    throw std::invalid_argument("decode step: " + std::to_string(rows) + " rows" +
                                plan_text(max_rows_, max_len_));
  check_layer_caches(caches.size(), decoder_.size());
  Tensor x = tgt_x0_.view({rows, d});
  embedding_forward_at(ids, positions, tgt_embed_->compute, x, std::sqrt(static_cast<float>(d)),
                       kPadId);
  for (size_t i = 0; i < decoder_.size(); ++i) x = decoder_[i]->step(x, positions, caches[i]);
  x = final_norm(x, dec_norm_g_, dec_norm_b_, dec_final_, dec_mean_, dec_rstd_);
  Tensor logits = logits_.view({rows, shape_.vocab});
  Tensor no_bias;
  linear_forward(x, out_proj_->compute, no_bias, logits);
  return logits;
}

}  // namespace nmt
