// IncrementalDecoder: the memory plan, the batch bookkeeping (start: cross-attention keys/values;
// step: the rows' tokens, self-attention lengths and positions; reorder: cache gathers) around the
// model's own decoding step (Transformer::decode_step), replayed from CUDA graphs where it pays.
#include "engine/decode/incremental_decoder.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "engine/model/host_copy.h"
#include "kernels/decode_ops.h"
#include "kernels/elementwise.h"
#include "kernels/op_checks.h"

namespace nmt {

namespace {

std::string number(int64_t n) {
  return std::to_string(n);
}

}  // namespace

IncrementalDecoder::IncrementalDecoder(Transformer& model, const IncrementalCapacity& capacity)
    : model_(model),
      d_model_(model.shape().d_model),
      heads_(model.shape().heads),
      capacity_(capacity),
      layers_(static_cast<size_t>(model.shape().decoder_layers)),
      caches_(layers_.size()),
      arena_(Arena::planner(model.device())) {
  if (capacity_.rows < 1 || capacity_.source_len < 1 || capacity_.positions < 1 ||
      capacity_.cache_rows < 0)
    throw std::invalid_argument("incremental decoder: capacity of " + number(capacity_.rows) +
                                " rows, source length " + number(capacity_.source_len) + ", " +
                                number(capacity_.positions) +
                                " positions: each must be at least 1");
  // A step's activations live in the model's own buffers, planned for max_rows rows.
  if (capacity_.rows > model.max_rows())
    throw std::invalid_argument("incremental decoder: capacity of " + number(capacity_.rows) +
                                " rows exceeds the model's plan (" + number(model.max_rows()) +
                                " rows)");
  if (capacity_.cache_rows == 0)
    capacity_.cache_rows = capacity_.rows * std::max(capacity_.source_len, capacity_.positions);
  // Plan once (count), then allocate exactly that much and lay the same buffers out for real.
  Arena planner = Arena::planner(model.device());
  plan(planner);
  arena_ = Arena(model.device(), planner.used());
  plan(arena_);
  // Attention reads every cached position up to the batch's length, the masked ones included
  // (weighted by 0 on the GPU): they must hold finite values, never uninitialised memory.
  // Reorder rotates buffers between the caches and the spare, so all of them start at zero.
  for (LayerBuffers& layer : layers_)
    for (Buffer* b : {&layer.self_k, &layer.self_v, &layer.cross_k, &layer.cross_v}) {
      Tensor all = b->flat();
      fill_zero(all);
    }
  Tensor spare = spare_.flat();
  fill_zero(spare);
  set_graphs(decode_graphs_default());
}

void IncrementalDecoder::set_graphs(bool on) {
  graphs_on_ = on && model_.device() == Device::cuda;
  if (graphs_on_ && graphs_ == nullptr) {
    graphs_ = std::make_unique<StepGraphs>();
    graphs_->reserve_scratch(step_scratch_bound());
  }
  if (!graphs_on_ && graphs_ != nullptr) graphs_->clear();
}

size_t IncrementalDecoder::step_scratch_bound() const {
  // The step's one scratch user is the unfused attention (kernels/cuda/attention.cu), which runs
  // only where cached_attention's shared memory cannot hold the scores: the [blocks, heads,
  // queries, length] probabilities in the activation dtype and 6 pointers per (block, head).
  // Self-attention: rows blocks of one query over the planned positions; cross-attention: sources
  // blocks of beam queries over the source. Both at most rows * heads * max(positions, source
  // length) probabilities. Twice that, plus 1 MiB, covers rounding and alignment.
  const auto length = static_cast<size_t>(std::max(capacity_.positions, capacity_.source_len));
  if (cached_attention_fits(d_model_ / heads_, static_cast<int64_t>(length)))
    return size_t{1} << 20;
  const auto rows = static_cast<size_t>(std::min(capacity_.rows, StepGraphs::kMaxRows));
  const size_t heads = static_cast<size_t>(heads_);
  const size_t probs = rows * heads * length * dtype_size(model_.shape().compute_dtype);
  return 2 * (probs + 6 * rows * heads * sizeof(void*)) + (size_t{1} << 20);
}

uint64_t IncrementalDecoder::layout_fingerprint() const {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a over the buffers' addresses
  auto add = [&](const Buffer& b) {
    hash ^= static_cast<uint64_t>(reinterpret_cast<uintptr_t>(b.flat().data));
    hash *= 1099511628211ull;
  };
  for (const LayerBuffers& layer : layers_)
    for (const Buffer* b : {&layer.self_k, &layer.self_v, &layer.cross_k, &layer.cross_v}) add(*b);
  add(spare_);
  return hash;
}

StepGraphStats IncrementalDecoder::graph_stats() const {
  return graphs_ != nullptr ? graphs_->stats() : StepGraphStats{};
}

std::optional<cuda::StreamHandoff> IncrementalDecoder::own_stream_scope() {
  if (!on_own_stream()) return std::nullopt;
  return std::optional<cuda::StreamHandoff>(std::in_place, graphs_->stream());
}

void IncrementalDecoder::plan(Arena& arena) {
  const int64_t rows = capacity_.rows, cache = capacity_.cache_rows * d_model_;
  const DType act = model_.shape().compute_dtype;
  for (LayerBuffers& layer : layers_) {
    layer.self_k = arena.allocate("incremental.self_k", act, cache);
    layer.self_v = arena.allocate("incremental.self_v", act, cache);
    layer.cross_k = arena.allocate("incremental.cross_k", act, cache);
    layer.cross_v = arena.allocate("incremental.cross_v", act, cache);
  }
  spare_ = arena.allocate("incremental.spare", act, cache);
  self_probs_ =
      arena.allocate("incremental.self_probs", DType::f32, rows * heads_ * capacity_.positions);
  cross_probs_ =
      arena.allocate("incremental.cross_probs", DType::f32, rows * heads_ * capacity_.source_len);
  step_ints_ = arena.allocate("incremental.step_ints", DType::i32, 3 * rows);
  gather_ints_ = arena.allocate("incremental.gather_ints", DType::i32, 3 * rows);
  source_lengths_ = arena.allocate("incremental.source_lengths", DType::i32, rows);
}

Tensor IncrementalDecoder::blocks(const Buffer& buffer, int64_t count, int64_t length) const {
  return buffer.view({count, length, d_model_});
}

std::vector<DecoderLayerCache>& IncrementalDecoder::layer_caches() {
  // Views only: rebuilt for every call, as reorder swaps buffers and shrinks the batch.
  Tensor self_lengths = step_ints_.flat().rows(rows_, 2 * rows_);
  Tensor self_probs = self_probs_.view({rows_, heads_, 1, positions_});
  Tensor cross_probs = cross_probs_.view({sources_, heads_, beam_, src_len_});
  Tensor source_lengths = source_lengths_.view({sources_});
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerBuffers& b = layers_[i];
    caches_[i].self =
        CachedKeysValues{blocks(b.self_k, rows_, positions_), blocks(b.self_v, rows_, positions_),
                         self_lengths, self_probs};
    caches_[i].cross =
        CachedKeysValues{blocks(b.cross_k, sources_, src_len_),
                         blocks(b.cross_v, sources_, src_len_), source_lengths, cross_probs};
  }
  return caches_;
}

void IncrementalDecoder::start(const Tensor& memory, const std::vector<int32_t>& source_lengths,
                               int64_t src_len, int64_t beam, int64_t positions) {
  const auto sources = static_cast<int64_t>(source_lengths.size());
  const int64_t d = d_model_;
  if (sources < 1 || beam < 1 || src_len < 1 || positions < 1 || sources * beam > capacity_.rows ||
      src_len > capacity_.source_len || positions > capacity_.positions ||
      sources * beam * positions > capacity_.cache_rows || sources * src_len > capacity_.cache_rows)
    throw std::invalid_argument("incremental decoder: " + number(sources) + " sources of length " +
                                number(src_len) + " x beam " + number(beam) + " x " +
                                number(positions) + " positions exceed the plan (" +
                                number(capacity_.rows) + " rows, source length " +
                                number(capacity_.source_len) + ", " + number(capacity_.positions) +
                                " positions, " + number(capacity_.cache_rows) + " cache rows)");
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
  auto scope = own_stream_scope();
  upload_i32(host_source_lengths_, source_lengths_);
  model_.cache_sources(memory, layer_caches());
}

Tensor IncrementalDecoder::step(const std::vector<int32_t>& tokens, int64_t position) {
  if (rows_ < 1)
    throw std::invalid_argument("incremental decoder: step without rows (start first)");
  if (static_cast<int64_t>(tokens.size()) != rows_)
    throw std::invalid_argument(
        "incremental decoder: " + number(static_cast<int64_t>(tokens.size())) + " tokens for " +
        number(rows_) + " rows");
  if (position != next_position_ || position >= positions_)
    throw std::invalid_argument("incremental decoder: position " + number(position) +
                                " out of order (next " + number(next_position_) + ", " +
                                number(positions_) + " planned)");
  auto scope = own_stream_scope();
  // One upload per step (before any capture: a graph holds no host copy): the ids, every row's
  // self-attention length (position + 1), every row's position. A replayed step reads all three.
  host_ints_.assign(tokens.begin(), tokens.end());
  host_ints_.resize(static_cast<size_t>(2 * rows_), static_cast<int32_t>(position + 1));
  host_ints_.resize(static_cast<size_t>(3 * rows_), static_cast<int32_t>(position));
  upload_i32(host_ints_, step_ints_);
  const Tensor ids = step_ints_.flat().rows(0, rows_);
  const Tensor positions = step_ints_.flat().rows(2 * rows_, 3 * rows_);
  auto decode = [&] { return model_.decode_step(ids, positions, layer_caches()); };
  const StepKey key{rows_, sources_, beam_, src_len_, positions_, layout_fingerprint()};
  Tensor logits =
      on_own_stream() ? graphs_->run(key, decode, /*long_lived=*/position == 0) : decode();
  next_position_ = position + 1;
  return logits;
}

void IncrementalDecoder::reorder(const std::vector<int32_t>& parents) {
  const auto new_rows = static_cast<int64_t>(parents.size());
  if (beam_ < 1) throw std::invalid_argument("incremental decoder: reorder before start");
  if (new_rows % beam_ != 0)
    throw std::invalid_argument("incremental decoder: " + number(new_rows) +
                                " rows after reorder are not a multiple of beam " + number(beam_));
  const int64_t new_sources = new_rows / beam_;
  std::vector<int32_t> source_of(static_cast<size_t>(new_sources));
  bool same_rows = new_rows == rows_, same_sources = new_sources == sources_;
  for (int64_t b = 0; b < new_sources; ++b) {
    for (int64_t j = 0; j < beam_; ++j) {
      int32_t parent = parents[b * beam_ + j];
      if (parent < 0 || parent >= rows_ || parent / beam_ != parents[b * beam_] / beam_)
        throw std::invalid_argument("incremental decoder: parent " + number(parent) + " of row " +
                                    number(b * beam_ + j) + " is not a row of its block's source");
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
  auto scope = own_stream_scope();
  // Graph steps have captured the caches' addresses. Up to kMaxInPlaceReorderRows rows the
  // gathered blocks are copied back in place (a second copy, negligible at few rows), so one graph
  // serves every step of a shape. Larger batches swap the gather target in (one copy, no second
  // buffer per layer): the layout changes, and alternating the walk's direction makes it alternate
  // between two layouts (a forward walk rotates the spare through the caches, a backward walk
  // rotates it back), each replayed from its own graph.
  const bool keep_addresses = on_own_stream() && new_rows <= kMaxInPlaceReorderRows;
  // One upload: the parent rows, the parent sources, and (keeping addresses) the identity.
  host_ints_.assign(parents.begin(), parents.end());
  host_ints_.insert(host_ints_.end(), source_of.begin(), source_of.end());
  if (keep_addresses) {
    host_ints_.resize(static_cast<size_t>(2 * new_rows + new_sources));
    std::iota(host_ints_.end() - new_rows, host_ints_.end(), 0);
  }
  upload_i32(host_ints_, gather_ints_);
  const Tensor ints = gather_ints_.flat();
  const Tensor row_index = ints.rows(0, new_rows);
  const Tensor source_index = ints.rows(new_rows, new_rows + new_sources);
  const int64_t identity_at = new_rows + new_sources;
  const Tensor row_identity =
      keep_addresses ? ints.rows(identity_at, identity_at + new_rows) : Tensor();
  const Tensor source_identity =
      keep_addresses ? ints.rows(identity_at, identity_at + new_sources) : Tensor();
  // Graph mode, the sources unchanged (beam search's reorder at almost every step), and few
  // positions in all: the gathers replay as one graph, so they copy every planned position (a
  // fixed launch), not just those decoded so far; the extra positions are other rows' finite
  // values, masked anyway. Past kMaxReorderGraphPositions rows x positions that extra copying
  // would cost more bandwidth than the launches it saves.
  constexpr int64_t kMaxReorderGraphPositions = 4096;
  const bool as_graph =
      keep_addresses && same_sources && new_rows * positions_ <= kMaxReorderGraphPositions;
  // Otherwise only the positions decoded so far are copied.
  const int64_t used = as_graph ? positions_ : next_position_;
  std::vector<Buffer*> self_caches;
  for (LayerBuffers& layer : layers_) {
    self_caches.push_back(&layer.self_k);
    self_caches.push_back(&layer.self_v);
  }
  if (!keep_addresses && reverse_swaps_) std::reverse(self_caches.begin(), self_caches.end());
  auto gather_self = [&] {
    for (Buffer* cache : self_caches)
      reorder_cache(*cache, rows_, positions_, row_index, used, row_identity, keep_addresses);
    return Tensor();
  };
  if (as_graph) {
    const StepKey key{new_rows, sources_, beam_, src_len_, positions_, layout_fingerprint(), rows_};
    graphs_->run(key, gather_self, /*long_lived=*/new_rows == rows_);
    rows_ = new_rows;
    return;
  }
  gather_self();
  if (!same_sources) {
    for (LayerBuffers& layer : layers_)
      for (Buffer* cache : {&layer.cross_k, &layer.cross_v})
        reorder_cache(*cache, sources_, src_len_, source_index, src_len_, source_identity,
                      keep_addresses);
    std::vector<int32_t> lengths(static_cast<size_t>(new_sources));
    for (int64_t b = 0; b < new_sources; ++b) lengths[b] = host_source_lengths_[source_of[b]];
    host_source_lengths_ = std::move(lengths);
    upload_i32(host_source_lengths_, source_lengths_);
  }
  if (!keep_addresses) reverse_swaps_ = !reverse_swaps_;
  rows_ = new_rows;
  sources_ = new_sources;
}

void IncrementalDecoder::reorder_cache(Buffer& cache, int64_t old_blocks, int64_t length,
                                       const Tensor& index, int64_t used, const Tensor& identity,
                                       bool keep_address) {
  const int64_t count = index.dim(0);
  Tensor gathered = blocks(spare_, count, length);
  gather_blocks(blocks(cache, old_blocks, length), index, gathered, used);
  if (!keep_address) {
    std::swap(cache, spare_);
    return;
  }
  Tensor in_place = blocks(cache, count, length);
  gather_blocks(gathered, identity, in_place, used);
}

}  // namespace nmt
