// IncrementalDecoder: weight lookup by parameter name, the memory plan, and the batch bookkeeping
// (start: cross-attention keys/values; reorder: cache gathers). The per-step graph is in
// incremental_decoder_step.cpp.
#include "engine/decode/incremental_decoder.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "engine/model/host_copy.h"
#include "kernels/decode_ops.h"
#include "kernels/elementwise.h"
#include "kernels/linear.h"
#include "kernels/op_checks.h"

    namespace nmt {

  namespace {

  std::string number(int64_t n) {
    return std::to_string(n);
  }

  }  // namespace

  IncrementalDecoder::IncrementalDecoder(Transformer & model, const IncrementalCapacity& capacity)
      : shape_(model.shape()),
        device_(model.device()),
        capacity_(capacity),
        arena_(Arena::planner(model.device())) {
    if (capacity_.rows < 1 || capacity_.source_len < 1 || capacity_.positions < 1 ||
        capacity_.cache_rows < 0)
      throw std::invalid_argument("incremental decoder: capacity of " + number(capacity_.rows) +
                                  " rows, source length " + number(capacity_.source_len) + ", " +
                                  number(capacity_.positions) +
                                  " positions: each must be at least 1");
    if (capacity_.cache_rows == 0)
      capacity_.cache_rows = capacity_.rows * std::max(capacity_.source_len, capacity_.positions);
    const ParamStore& store = model.params();
    auto find = [&](const std::string& name) {
      const Param* p = store.find(name);
      if (!p)
        throw std::invalid_argument("incremental decoder: the model has no parameter " + name);
      return p;
    };
    bool shared = shape_.shared_embeddings;
    embedding_ = find(shared ? "encoder.embed_tokens.weight" : "decoder.embed_tokens.weight");
    output_weight_ = shared ? embedding_ : find("decoder.output_projection.weight");
    if (shape_.pre_norm)
      final_norm_ = Norm{find("decoder.layer_norm.weight"), find("decoder.layer_norm.bias")};
    auto linear = [&](const std::string& name) {
      return Linear{find(name + ".weight"), find(name + ".bias")};
    };
    auto norm = [&](const std::string& name) {
      return Norm{find(name + ".weight"), find(name + ".bias")};
    };
    auto attention = [&](const std::string& name) {
      return Attention{linear(name + ".q_proj"), linear(name + ".k_proj"), linear(name + ".v_proj"),
                       linear(name + ".out_proj")};
    };
    for (int64_t i = 0; i < shape_.decoder_layers; ++i) {
      const std::string prefix = "decoder.layers." + std::to_string(i);
      Layer layer;
      layer.self_attn = attention(prefix + ".self_attn");
      layer.cross_attn = attention(prefix + ".encoder_attn");
      layer.self_norm = norm(prefix + ".self_attn_layer_norm");
      layer.cross_norm = norm(prefix + ".encoder_attn_layer_norm");
      layer.ffn_norm = norm(prefix + ".final_layer_norm");
      layer.fc1 = linear(prefix + ".fc1");
      layer.fc2 = linear(prefix + ".fc2");
      layers_.push_back(layer);
    }
    // Plan once (count), then allocate exactly that much and lay the same buffers out for real.
    Arena planner = Arena::planner(device_);
    plan(planner);
    arena_ = Arena(device_, planner.used());
    plan(arena_);
    // Attention reads every cached position up to the batch's length, the masked ones included
    // (weighted by 0 on the GPU): they must hold finite values, never uninitialised memory.
    // Reorder rotates buffers between the caches and the spare, so all of them start at zero.
    for (Layer& layer : layers_)
      for (Buffer* b : {&layer.self_k, &layer.self_v, &layer.cross_k, &layer.cross_v}) {
        Tensor all = b->flat();
        fill_zero(all);
      }
    Tensor spare = spare_.flat();
    fill_zero(spare);
  }

  void IncrementalDecoder::plan(Arena & arena) {
    const int64_t rows = capacity_.rows, d = shape_.d_model, cache = capacity_.cache_rows * d;
    const DType act = shape_.compute_dtype;
    for (Layer& layer : layers_) {
      layer.self_k = arena.allocate("incremental.self_k", act, cache);
      layer.self_v = arena.allocate("incremental.self_v", act, cache);
      layer.cross_k = arena.allocate("incremental.cross_k", act, cache);
      layer.cross_v = arena.allocate("incremental.cross_v", act, cache);
    }
    spare_ = arena.allocate("incremental.spare", act, cache);
    for (Buffer& b : hidden_) b = arena.allocate("incremental.hidden", act, rows * d);
    normed_ = arena.allocate("incremental.normed", act, rows * d);
    branch_ = arena.allocate("incremental.branch", act, rows * d);
    q_ = arena.allocate("incremental.q", act, rows * d);
    k_new_ = arena.allocate("incremental.k_new", act, rows * d);
    v_new_ = arena.allocate("incremental.v_new", act, rows * d);
    context_ = arena.allocate("incremental.context", act, rows * d);
    ffn_hidden_ = arena.allocate("incremental.ffn_hidden", act, rows * shape_.ffn_dim);
    mean_ = arena.allocate("incremental.mean", DType::f32, rows);
    rstd_ = arena.allocate("incremental.rstd", DType::f32, rows);
    self_probs_ = arena.allocate("incremental.self_probs", DType::f32,
                                 rows * shape_.heads * capacity_.positions);
    cross_probs_ = arena.allocate("incremental.cross_probs", DType::f32,
                                  rows * shape_.heads * capacity_.source_len);
    logits_ = arena.allocate("incremental.logits", act, rows * shape_.vocab);
    step_ints_ = arena.allocate("incremental.step_ints", DType::i32, 2 * rows);
    gather_ints_ = arena.allocate("incremental.gather_ints", DType::i32, 2 * rows);
    source_lengths_ = arena.allocate("incremental.source_lengths", DType::i32, rows);
  }

  Tensor IncrementalDecoder::blocks(const Buffer& buffer, int64_t count, int64_t length) const {
    return buffer.view({count, length, shape_.d_model});
  }

  void IncrementalDecoder::start(const Tensor& memory, const std::vector<int32_t>& source_lengths,
                                 int64_t src_len, int64_t beam, int64_t positions) {
    const auto sources = static_cast<int64_t>(source_lengths.size());
    const int64_t d = shape_.d_model;
    if (sources < 1 || beam < 1 || src_len < 1 || positions < 1 ||
        sources * beam > capacity_.rows || src_len > capacity_.source_len ||
        positions > capacity_.positions || sources * beam * positions > capacity_.cache_rows ||
        sources * src_len > capacity_.cache_rows)
      throw std::invalid_argument(
          "incremental decoder: " + number(sources) + " sources of length " + number(src_len) +
          " x beam " + number(beam) + " x " + number(positions) + " positions exceed the plan (" +
          number(capacity_.rows) + " rows, source length " + number(capacity_.source_len) + ", " +
          number(capacity_.positions) + " positions, " + number(capacity_.cache_rows) +
          " cache rows)");
    check_shape("incremental decoder", "memory", memory, {sources * src_len, d});
    for (int32_t length : source_lengths)
      if (length < 0 || length > src_len)
        throw std::invalid_argument("incremental decoder: source length " + number(length) +
                                    " is outside [0, " + number(src_len) + "]");
    rows_ = sources * beam;
    sources_ = sources;
    beam_ = beam;
    src_len_ = src_len;
    positions_ = positions;
    next_position_ = 0;
    host_source_lengths_ = source_lengths;
    upload_i32(host_source_lengths_, source_lengths_);
    Tensor no_bias;
    for (Layer& layer : layers_) {
      Tensor k = layer.cross_k.view({sources * src_len, d}),
             v = layer.cross_v.view({sources * src_len, d});
      linear_forward(memory, layer.cross_attn.k.weight->compute, layer.cross_attn.k.bias->compute,
                     k);
      linear_forward(memory, layer.cross_attn.v.weight->compute, layer.cross_attn.v.bias->compute,
                     v);
    }
  }

  void IncrementalDecoder::reorder(const std::vector<int32_t>& parents) {
    const auto new_rows = static_cast<int64_t>(parents.size());
    if (beam_ < 1) throw std::invalid_argument("incremental decoder: reorder before start");
    if (new_rows % beam_ != 0)
      throw std::invalid_argument("incremental decoder: " + number(new_rows) +
                                  " rows after reorder are not a multiple of beam " +
                                  number(beam_));
    const int64_t new_sources = new_rows / beam_;
    std::vector<int32_t> source_of(static_cast<size_t>(new_sources));
    bool same_rows = new_rows == rows_, same_sources = new_sources == sources_;
    for (int64_t b = 0; b < new_sources; ++b) {
      for (int64_t j = 0; j < beam_; ++j) {
        int32_t parent = parents[b * beam_ + j];
        if (parent < 0 || parent >= rows_ || parent / beam_ != parents[b * beam_] / beam_)
          throw std::invalid_argument("incremental decoder: parent " + number(parent) + " of row " +
                                      number(b * beam_ + j) +
                                      " is not a row of its block's source");
        same_rows = same_rows && parent == b * beam_ + j;
      }
      source_of[b] = parents[b * beam_] / static_cast<int32_t>(beam_);
      if (b > 0 && source_of[b] <= source_of[b - 1])
        throw std::invalid_argument("incremental decoder: reorder must keep the sources in order");
      same_sources = same_sources && source_of[b] == b;
    }
    if (same_rows) return;
    if (new_rows == 0) {  // every source finished
      rows_ = sources_ = 0;
      return;
    }
    // One upload: the parent rows, then the parent sources.
    host_ints_.assign(parents.begin(), parents.end());
    host_ints_.insert(host_ints_.end(), source_of.begin(), source_of.end());
    upload_i32(host_ints_, gather_ints_);
    Tensor row_index = gather_ints_.view({new_rows});
    // Gather into the spare buffer, then swap the two: one copy per cache, no second buffer per
    // layer. Only the positions decoded so far are copied.
    for (Layer& layer : layers_)
      for (Buffer* cache : {&layer.self_k, &layer.self_v}) {
        Tensor dst = blocks(spare_, new_rows, positions_);
        gather_blocks(blocks(*cache, rows_, positions_), row_index, dst, next_position_);
        std::swap(*cache, spare_);
      }
    if (!same_sources) {
      Tensor source_index = gather_ints_.flat().rows(new_rows, new_rows + new_sources);
      for (Layer& layer : layers_)
        for (Buffer* cache : {&layer.cross_k, &layer.cross_v}) {
          Tensor dst = blocks(spare_, new_sources, src_len_);
          gather_blocks(blocks(*cache, sources_, src_len_), source_index, dst, src_len_);
          std::swap(*cache, spare_);
        }
      std::vector<int32_t> lengths(static_cast<size_t>(new_sources));
      for (int64_t b = 0; b < new_sources; ++b) lengths[b] = host_source_lengths_[source_of[b]];
      host_source_lengths_ = std::move(lengths);
      upload_i32(host_source_lengths_, source_lengths_);
    }
    rows_ = new_rows;
    sources_ = new_sources;
  }

}  // namespace nmt
