// IncrementalDecoder: the Transformer decoder run one target position at a time for a batch of
// hypotheses, with a key/value cache per decoder layer for the self-attention and the
// cross-attention keys/values computed once per batch from the encoder output. Step t of a row
// computes exactly what Transformer::decode_last_logits computes on that row's whole prefix (the
// same ops on the same rows), at the cost of one position instead of t. Memory is planned once.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/decode/step_decoder.h"
#include "engine/model/arena.h"
#include "engine/model/model_shape.h"
#include "engine/model/param_store.h"
#include "engine/model/transformer.h"

namespace nmt {

struct IncrementalCapacity {
  int64_t rows = 0;        // hypotheses stepped together (sources * beam)
  int64_t source_len = 0;  // longest padded source
  int64_t positions = 0;   // most target positions of a row, bos included
  // Positions each cache holds: a batch needs rows * positions (self-attention) and
  // sources * src_len (cross-attention) within it. 0 = rows * max(source_len, positions).
  int64_t cache_rows = 0;
};

class IncrementalDecoder final : public StepDecoder {
 public:
  // Reads the model's shape, device and weights (the working copies, Param::compute) by name; the
  // model must outlive the decoder. Throws std::invalid_argument for a capacity below 1.
  IncrementalDecoder(Transformer& model, const IncrementalCapacity& capacity);

  // StepDecoder (engine/decode/step_decoder.h). start computes every layer's cross-attention keys
  // and values; step appends one position to every row's self-attention cache; reorder gathers the
  // caches of the surviving rows (and of the surviving sources when some dropped out).
  void start(const Tensor& memory, const std::vector<int32_t>& source_lengths, int64_t src_len,
             int64_t beam, int64_t positions) override;
  Tensor step(const std::vector<int32_t>& tokens, int64_t position) override;
  void reorder(const std::vector<int32_t>& parents) override;
  int64_t rows() const override { return rows_; }

  const IncrementalCapacity& capacity() const { return capacity_; }
  size_t arena_bytes() const { return arena_.capacity(); }

 private:
  struct Linear {
    const Param* weight = nullptr;  // [out, in]
    const Param* bias = nullptr;    // [out]
  };
  struct Norm {
    const Param* gain = nullptr;  // [d_model]
    const Param* bias = nullptr;
  };
  struct Attention {
    Linear q, k, v, out;
  };
  struct Layer {
    Attention self_attn, cross_attn;
    Norm self_norm, cross_norm, ffn_norm;
    Linear fc1, fc2;
    Buffer self_k, self_v;    // [cache_rows, d_model]: [rows, positions, d_model] while decoding
    Buffer cross_k, cross_v;  // [cache_rows, d_model]: [sources * src_len, d_model]
  };

  void plan(Arena& arena);

  // One residual sublayer at the current position (post-norm LN(x + f(x)), pre-norm
  // x + f(LN(x))), as engine/model/sublayer.cpp computes it without dropout. x, out: [rows,
  // d_model].
  template <typename F>
  void sublayer(const Tensor& x, const Norm& norm, Tensor& out, F&& f);
  void self_attention(Layer& layer, const Tensor& in, int64_t position, Tensor& out);
  void cross_attention(const Layer& layer, const Tensor& in, Tensor& out);
  void feed_forward(const Layer& layer, const Tensor& in, Tensor& out);
  // [count, length, d_model] view of the first count * length rows of a cache buffer.
  Tensor blocks(const Buffer& buffer, int64_t count, int64_t length) const;

  ModelShape shape_;
  Device device_;
  IncrementalCapacity capacity_;
  const Param* embedding_ = nullptr;      // [vocab, d_model] target embedding
  const Param* output_weight_ = nullptr;  // [vocab, d_model] output projection
  Norm final_norm_;                       // pre-norm only
  std::vector<Layer> layers_;

  Arena arena_;
  Buffer spare_;  // [cache_rows, d_model]: the gather target of reorder, swapped with a cache
  Buffer hidden_[2], normed_, branch_, q_, k_new_, v_new_, context_;  // [rows, d_model]
  Buffer ffn_hidden_;                                                 // [rows, ffn_dim]
  Buffer mean_, rstd_;                                                // [rows] f32
  Buffer self_probs_;      // [rows, heads, 1, positions] f32
  Buffer cross_probs_;     // [sources, heads, beam, src_len] f32
  Buffer logits_;          // [rows, vocab]
  Buffer step_ints_;       // [2 * rows] i32: token ids, then self-attention lengths
  Buffer gather_ints_;     // [2 * rows] i32: parent rows, then parent sources
  Buffer source_lengths_;  // [rows] i32 (sources <= rows)

  // The current batch.
  int64_t rows_ = 0, sources_ = 0, beam_ = 0, src_len_ = 0, positions_ = 0;
  int64_t next_position_ = 0;  // positions decoded so far (cached per row)
  std::vector<int32_t> host_source_lengths_, host_ints_;
};

}  // namespace nmt
