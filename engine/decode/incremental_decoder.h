// IncrementalDecoder: the StepDecoder beam search uses. It owns the decoding state, planned once: a
// key/value cache per decoder layer for the self-attention, the cross-attention keys/values
// computed once per batch from the encoder output, and the step's scratch. The computation is the
// model's own (Transformer::cache_sources, Transformer::decode_step: the same decoder layers and
// blocks as training's forward, without dropout); this class only feeds it the rows' tokens and
// keeps the caches in step with the surviving hypotheses. Step t of a row gives exactly the logits
// Transformer::decode_last_logits gives on that row's whole prefix, at the cost of one position.
// On the GPU, steps of up to StepGraphs::kMaxRows rows replay from CUDA graphs
// (engine/decode/step_graphs.h) unless graphs are turned off (NMT_DECODE_GRAPHS=0, set_graphs).
// A reorder of up to kMaxInPlaceReorderRows rows keeps the caches where they are (a graph's step
// reads them there); a larger one swaps each gathered cache in (half the copying) and alternates
// the direction of its swaps, so the layout alternates between two and each has its graph.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/decode/step_decoder.h"
#include "engine/decode/step_graphs.h"
#include "engine/model/arena.h"
#include "engine/model/transformer.h"

namespace nmt {

struct IncrementalCapacity {
  int64_t rows = 0;        // hypotheses stepped together (sources * beam), within the model's plan
  int64_t source_len = 0;  // longest padded source
  int64_t positions = 0;   // most target positions of a row, bos included
  // Positions each cache holds: a batch needs rows * positions (self-attention) and
  // sources * src_len (cross-attention) within it. 0 = rows * max(source_len, positions).
  int64_t cache_rows = 0;
};

class IncrementalDecoder final : public StepDecoder {
 public:
  // Steps the model's decoder (its shape, device, weights and activation buffers); the model must
  // outlive the decoder. Throws std::invalid_argument for a capacity below 1, or more rows than
  // the model's plan (max_rows) holds.
  IncrementalDecoder(Transformer& model, const IncrementalCapacity& capacity);

  // StepDecoder (engine/decode/step_decoder.h). start computes every layer's cross-attention keys
  // and values; step appends one position to every row's self-attention cache; reorder gathers the
  // caches of the surviving rows (and of the surviving sources when some dropped out).
  void start(const Tensor& memory, const std::vector<int32_t>& source_lengths, int64_t src_len,
             int64_t beam, int64_t positions) override;
  Tensor step(const std::vector<int32_t>& tokens, int64_t position) override;
  void reorder(const std::vector<int32_t>& parents) override;
  int64_t rows() const override { return rows_; }

  // Past this many rows a reorder swaps its gathered caches in rather than copying them back.
  static constexpr int64_t kMaxInPlaceReorderRows = 64;

  const IncrementalCapacity& capacity() const { return capacity_; }
  size_t arena_bytes() const { return arena_.capacity(); }

  // Whether steps replay from CUDA graphs (on the GPU; decode_graphs_default() at construction).
  // Turning them off drops the graphs; the logits are the same bits either way (the graphs replay
  // the same kernels), only the launch cost differs.
  void set_graphs(bool on);
  bool graphs() const { return graphs_on_; }
  // What the graphs did so far (all zero while graphs are off or on the CPU).
  StepGraphStats graph_stats() const;

 private:
  // The most scratch memory one step of up to StepGraphs::kMaxRows rows takes on the GPU.
  size_t step_scratch_bound() const;
  // Where every cache buffer lies now, as one number (StepKey::layout).
  uint64_t layout_fingerprint() const;

  struct LayerBuffers {
    Buffer self_k, self_v;    // [cache_rows, d_model]: [rows, positions, d_model] while decoding
    Buffer cross_k, cross_v;  // [cache_rows, d_model]: [sources, src_len, d_model]
  };

  void plan(Arena& arena);
  // Whether this decoder's work runs on its own stream, in graphs where the batch is small.
  bool on_own_stream() const { return graphs_ != nullptr && graphs_on_; }
  // While graphs are on: the calling scope's work on the decoder's stream, in order with the
  // caller's stream (else nothing: the caller's stream).
  std::optional<cuda::StreamHandoff> own_stream_scope();
  // Reorders one cache ([old_blocks, length, d_model] used): gathers the first `used` positions of
  // the blocks index ([count] i32) names into the spare, then copies them back in place through
  // identity ([count] i32: 0, 1, ...; keep_address, the address a captured step writes) or swaps
  // the spare in (one copy; the layout changes).
  void reorder_cache(Buffer& cache, int64_t old_blocks, int64_t length, const Tensor& index,
                     int64_t used, const Tensor& identity, bool keep_address);
  // The current batch's views of every layer's caches, for the model's decoding calls.
  std::vector<DecoderLayerCache>& layer_caches();
  // [count, length, d_model] view of the first count * length rows of a cache buffer.
  Tensor blocks(const Buffer& buffer, int64_t count, int64_t length) const;

  Transformer& model_;
  int64_t d_model_, heads_;
  IncrementalCapacity capacity_;
  std::vector<LayerBuffers> layers_;
  std::vector<DecoderLayerCache> caches_;

  Arena arena_;
  Buffer spare_;        // [cache_rows, d_model]: reorder's gather target, swapped in or copied back
  Buffer self_probs_;   // [rows, heads, 1, positions] f32
  Buffer cross_probs_;  // [sources, heads, beam, src_len] f32
  Buffer step_ints_;    // [3 * rows] i32: token ids, self-attention lengths, positions
  Buffer gather_ints_;  // [3 * rows] i32: parent rows, parent sources, identity 0..rows-1
  Buffer source_lengths_;  // [rows] i32 (sources <= rows)

  // The current batch.
  int64_t rows_ = 0, sources_ = 0, beam_ = 0, src_len_ = 0, positions_ = 0;
  int64_t next_position_ = 0;  // positions decoded so far (cached per row)
  std::vector<int32_t> host_source_lengths_, host_ints_;

  // CUDA graphs of the step (GPU only, created with graphs on). Declared last: its stream is
  // synchronised and released before the arena's memory goes.
  bool graphs_on_ = false;
  bool reverse_swaps_ = false;  // the next swapping reorder walks the caches last to first
  std::unique_ptr<StepGraphs> graphs_;
};

}  // namespace nmt
