// Beam search: grouping sources to fit the model's plan, the step loop (one decoder position per
// hypothesis through a StepDecoder, then a reorder of its caches), expansion from each row's top
// candidates and log-sum-exp (logits_top_k, on the logits' device), and the finishing rules.
#include "engine/decode/decode.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "engine/decode/incremental_decoder.h"
#include "engine/decode/step_graphs.h"
#include "engine/model/host_copy.h"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/stream.h"
#include "kernels/decode_ops.h"
#include "kernels/elementwise.h"

namespace nmt {

namespace {

// Bytes of the decoder's caches at cache scale 1: every decoder layer's self- and cross-attention
// keys and values plus the reorder's spare, max_rows positions each.
size_t cache_unit_bytes(const Transformer& model) {
  const ModelShape& shape = model.shape();
  return static_cast<size_t>(4 * shape.decoder_layers + 1) * static_cast<size_t>(model.max_rows()) *
         static_cast<size_t>(shape.d_model) * dtype_size(shape.compute_dtype);
}

struct LiveHypothesis {
  std::vector<int32_t> tokens;  // [generated] ids, no bos
  double log_prob = 0;
  int32_t parent = 0;  // slot of the hypothesis it extends, among the previous step's live ones
};

struct Candidate {
  double log_prob;  // of the parent extended by `token`
  int32_t token;
  int32_t slot;  // index of the parent among the sentence's live hypotheses
};

// The search state of one sentence.
struct SentenceSearch {
  int64_t max_new = 0;  // target tokens allowed before eos is forced
  std::vector<LiveHypothesis> live;
  std::vector<Hypothesis> finished;
};

// The candidates of one hypothesis (one row of logits), as logits_top_k returns them: its
// `count` best tokens (highest logit first, equal logits lower id first), their logits, the row's
// log-sum-exp, and the logit of eos.
struct RowCandidates {
  const int32_t* ids;   // [count]
  const float* logits;  // [count]
  int64_t count;
  double log_sum_exp;
  float eos_logit;
};

// Extends every live hypothesis of `s` by one token. Candidates are ranked by log-probability; an
// eos among the best `beam` finishes its parent, and the best `beam` others stay live. Each parent
// offers its beam + 1 best tokens: enough for `beam` non-eos children even when one is eos.
// rows(slot): the candidates of the live hypothesis in that slot.
template <typename Rows>
void expand(SentenceSearch& s, Rows&& rows, const BeamOptions& o,
            std::vector<Candidate>& candidates) {
  auto generated = static_cast<int64_t>(s.live.front().tokens.size());
  bool forced = generated >= s.max_new;  // at the length limit only eos may follow
  candidates.clear();
  for (size_t slot = 0; slot < s.live.size(); ++slot) {
    const RowCandidates row = rows(slot);
    const double parent = s.live[slot].log_prob;
    if (forced) {
      candidates.push_back(
          {parent + (row.eos_logit - row.log_sum_exp), kEosId, static_cast<int32_t>(slot)});
      continue;
    }
    for (int64_t i = 0; i < row.count; ++i) {
      candidates.push_back(
          {parent + (row.logits[i] - row.log_sum_exp), row.ids[i], static_cast<int32_t>(slot)});
    }
  }
  // Stable: equal scores keep parent order, then logit order (beam 1 = greedy's argmax).
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.log_prob > b.log_prob; });
  std::vector<LiveHypothesis> next;
  for (size_t n = 0; n < candidates.size(); ++n) {
    const Candidate& c = candidates[n];
    const LiveHypothesis& parent = s.live[c.slot];
    if (c.token == kEosId) {
      if (static_cast<int64_t>(n) < o.beam)
        s.finished.push_back(
            {parent.tokens, c.log_prob, c.log_prob / length_penalty(generated + 1, o.alpha)});
    } else if (static_cast<int64_t>(next.size()) < o.beam) {
      LiveHypothesis child{parent.tokens, c.log_prob, c.slot};
      child.tokens.push_back(c.token);
      next.push_back(std::move(child));
    }
    if (static_cast<int64_t>(next.size()) == o.beam && static_cast<int64_t>(n) + 1 >= o.beam) break;
  }
  s.live = std::move(next);
}

// True when the sentence's answer can no longer change: no live hypothesis left, `beam` finished,
// or no live hypothesis can end with a better score than the best finished one. Log-probabilities
// only fall as tokens are added, and with alpha >= 0 the penalty is largest at the length limit,
// so log_prob / lp(max_new + 1) bounds every score a live hypothesis can still reach.
bool settled(const SentenceSearch& s, const BeamOptions& o) {
  if (s.live.empty() || static_cast<int64_t>(s.finished.size()) >= o.beam) return true;
  if (s.finished.empty()) return false;
  double best = s.finished.front().score;
  for (const Hypothesis& h : s.finished) best = std::max(best, h.score);
  double largest_penalty = length_penalty(s.max_new + 1, o.alpha);
  for (const LiveHypothesis& h : s.live)
    if (h.log_prob / largest_penalty > best) return false;
  return true;
}

}  // namespace

void validate_beam_options(const BeamOptions& o) {
  if (o.beam < 1)
    throw std::invalid_argument("beam: must be at least 1, got " + std::to_string(o.beam));
  if (!std::isfinite(o.alpha) || o.alpha < 0)
    throw std::invalid_argument("alpha: the length penalty exponent must be >= 0, got " +
                                std::to_string(o.alpha));
  if (!std::isfinite(o.max_len_a) || o.max_len_a < 0)
    throw std::invalid_argument("max-len-a: must be >= 0, got " + std::to_string(o.max_len_a));
  if (o.max_len_b < 0)
    throw std::invalid_argument("max-len-b: must be >= 0, got " + std::to_string(o.max_len_b));
}

double length_penalty(int64_t length, double alpha) {
  return std::pow((5.0 + static_cast<double>(length)) / 6.0, alpha);
}

int64_t padded_block_count(int64_t live, int64_t current, int64_t beam, int64_t graph_rows) {
  // 1, 2, 3, 4, 6, 8, 12, 16, 24, ...: at most a third of a step's rows are padding.
  int64_t padded = 1;
  while (padded < live)
    padded = padded == 1 ? 2 : padded % 3 == 0 ? padded / 3 * 4 : padded / 2 * 3;
  padded = std::min(padded, current);
  // Past the rows a graph replays, padding buys no graph and costs compute-bound rows.
  return padded * beam > graph_rows ? live : padded;
}

int64_t max_target_tokens(const BeamOptions& o, int64_t source_tokens, const Transformer& model) {
  // The prefix (bos + tokens) must fit the planned length, and beam prefixes the planned rows.
  int64_t limit = std::min(model.max_len() - 1, model.max_rows() / o.beam - 1);
  double rule = std::floor(o.max_len_a * static_cast<double>(source_tokens) +
                           static_cast<double>(o.max_len_b));
  return std::max<int64_t>(0, static_cast<int64_t>(std::min(rule, static_cast<double>(limit))));
}

BeamSearch::BeamSearch(Transformer& model, const BeamOptions& options)
    : model_(model),
      options_(options),
      cache_scale_(model.device() == Device::cuda
                       ? device_cache_scale(cache_unit_bytes(model), cuda::free_device_memory())
                       : 1),
      candidates_arena_(Arena::planner(model.device())) {
  validate_beam_options(options);
  plan_candidates();
  // The caches hold cache_rows() positions: a group's sentences * beam * max(source, prefix) may
  // reach that, and rows_needed is smallest for one-token sources, which bounds the hypotheses of
  // a step, as does the model's plan (a step's activations are its buffers).
  const int64_t sentences = std::max<int64_t>(
      1, std::min(model.max_rows() / options.beam, cache_rows() / rows_needed(1, 1)));
  IncrementalCapacity capacity;
  capacity.rows = sentences * options.beam;
  capacity.source_len = model.max_len();
  capacity.positions = model.max_len();
  capacity.cache_rows = cache_rows();
  decoder_ = std::make_unique<IncrementalDecoder>(model, capacity);
  block_padding_ = incremental_decoder()->graphs();
}

BeamSearch::BeamSearch(Transformer& model, const BeamOptions& options,
                       std::unique_ptr<StepDecoder> decoder)
    : model_(model),
      options_(options),
      decoder_(std::move(decoder)),
      candidates_arena_(Arena::planner(model.device())) {
  validate_beam_options(options);
  plan_candidates();
}

void BeamSearch::plan_candidates() {
  if (model_.device() != Device::cuda || candidates_per_row() > kMaxTopK) return;
  // Every step's rows fit the model's plan (rows * prefix <= max_rows).
  const int64_t rows = model_.max_rows(), k = candidates_per_row();
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) candidates_arena_ = Arena(model_.device(), candidates_arena_.used());
    candidates_ = candidates_arena_.allocate("beam.candidates", DType::i32, rows * (2 * k + 2));
  }
}

int64_t device_cache_scale(size_t unit_bytes, size_t free_bytes) {
  for (int64_t scale = kDeviceCacheScale; scale > 1; scale /= 2)
    if (static_cast<double>(unit_bytes) * static_cast<double>(scale) <=
        0.5 * static_cast<double>(free_bytes))
      return scale;
  return 1;
}

int64_t BeamSearch::cache_rows() const {
  return model_.max_rows() * cache_scale_;
}

bool BeamSearch::group_fits(int64_t sentences, int64_t padded_source,
                            int64_t longest_source) const {
  return sentences * padded_source <= model_.max_rows() &&  // the encoder's plan
         sentences * options_.beam <= model_.max_rows() &&  // a step's rows
         sentences * rows_needed(padded_source, longest_source) <= cache_rows();  // the caches
}

int64_t BeamSearch::rows_needed(int64_t padded_source, int64_t longest_source) const {
  int64_t longest_prefix = max_target_tokens(options_, longest_source, model_) + 1;
  return options_.beam * std::max(padded_source, longest_prefix);
}

std::vector<std::vector<Hypothesis>> BeamSearch::search(
    const std::vector<std::vector<int32_t>>& sources) {
  std::vector<std::vector<Hypothesis>> out(sources.size());
  std::vector<std::vector<int32_t>> group;
  std::vector<int64_t> group_ids;
  int64_t group_longest = 0;
  auto flush = [&] {
    if (group.empty()) return;
    std::vector<std::vector<int32_t>> no_targets(group.size());
    std::vector<std::vector<Hypothesis>> found =
        search_fitting(make_batch(group, no_targets, group_ids, 1));
    for (size_t m = 0; m < group.size(); ++m) out[group_ids[m]] = std::move(found[m]);
    group.clear();
    group_ids.clear();
    group_longest = 0;
  };
  for (size_t i = 0; i < sources.size(); ++i) {
    auto length = static_cast<int64_t>(sources[i].size());
    if (length == 0) {
      out[i].assign(1, Hypothesis{});
      continue;
    }
    if (length > model_.max_len() || options_.beam * length > model_.max_rows())
      throw std::invalid_argument("source " + std::to_string(i) + ": " + std::to_string(length) +
                                  " tokens exceed what the model's plan holds with beam " +
                                  std::to_string(options_.beam) + " (length " +
                                  std::to_string(model_.max_len()) + ", " +
                                  std::to_string(model_.max_rows()) + " rows)");
    // Group lengths grow monotonically, so the group's need is set by its longest source.
    int64_t longest = std::max(group_longest, length);
    auto sentences = static_cast<int64_t>(group.size()) + 1;
    if (!group.empty() && !group_fits(sentences, padded_length(longest), longest)) flush();
    group.push_back(sources[i]);
    group_ids.push_back(static_cast<int64_t>(i));
    group_longest = std::max(group_longest, length);
  }
  flush();
  return out;
}

std::vector<std::vector<Hypothesis>> BeamSearch::search(const Batch& batch) {
  bool fits = batch.sentences > 0 && batch.src_len <= model_.max_len();
  int64_t longest = 0;
  for (int32_t length : batch.src_lengths) {
    fits = fits && length > 0;
    longest = std::max<int64_t>(longest, length);
  }
  if (fits && group_fits(batch.sentences, batch.src_len, longest)) return search_fitting(batch);
  std::vector<std::vector<int32_t>> sources(static_cast<size_t>(batch.sentences));
  for (int64_t i = 0; i < batch.sentences; ++i) {
    auto begin = batch.src.begin() + i * batch.src_len;
    sources[i].assign(begin, begin + batch.src_lengths[i]);
  }
  return search(sources);
}

std::vector<std::vector<Hypothesis>> BeamSearch::search_fitting(const Batch& batch) {
  const int64_t sentences = batch.sentences, beam = options_.beam;
  Tensor encoded = model_.encode_sources(batch);  // [sentences * src_len, d]

  std::vector<SentenceSearch> state(static_cast<size_t>(sentences));
  int64_t positions = 1;
  for (int64_t i = 0; i < sentences; ++i) {
    state[i].max_new = max_target_tokens(options_, batch.src_lengths[i], model_);
    state[i].live.assign(1, LiveHypothesis{});  // bos alone; the other slots start empty
    positions = std::max(positions, state[i].max_new + 1);
  }
  // Row a * beam + j is slot j of the sentence in block a; empty slots repeat the first hypothesis
  // (their rows are computed and ignored). blocks[a] is that sentence, or kSettled once its answer
  // is settled: with block padding on, a settled sentence's block stays (rows computed, ignored)
  // until the live ones fit a smaller padded count, so a step's shape lasts many steps.
  constexpr int64_t kSettled = -1;
  decoder_->start(encoded, batch.src_lengths, batch.src_len, beam, positions);
  std::vector<int64_t> blocks(static_cast<size_t>(sentences));
  std::iota(blocks.begin(), blocks.end(), 0);
  int64_t live = sentences;
  std::vector<int32_t> tokens(static_cast<size_t>(sentences * beam), kBosId), parents;
  const int64_t k = candidates_per_row();

  for (int64_t position = 0; live > 0; ++position) {
    Tensor logits = decoder_->step(tokens, position);  // [rows, vocab]
    read_candidates(logits);
    // Sentences expand independently from their rows' candidates (2k + 2 numbers a row).
    const int64_t rows = logits.dim(0);
    stepped_rows_ += rows;
    std::vector<Candidate> candidates;
    for (size_t a = 0; a < blocks.size(); ++a) {
      if (blocks[a] == kSettled) {
        padding_rows_ += beam;
        continue;
      }
      SentenceSearch& s = state[blocks[a]];
      auto row = [&](size_t slot) {
        const int64_t r = static_cast<int64_t>(a) * beam + static_cast<int64_t>(slot);
        return RowCandidates{candidate_ids_host_ + r * k, candidate_values_host_ + r * k, k,
                             candidate_values_host_[rows * k + 2 * r],
                             candidate_values_host_[rows * k + 2 * r + 1]};
      };
      expand(s, row, options_, candidates);
      if (settled(s, options_)) {
        blocks[a] = kSettled;
        --live;
      }
    }
    if (live == 0) break;
    // The blocks kept, in order: every live one, and settled ones up to the padded count. Each
    // new row continues its parent's row, whose cached positions the decoder gathers.
    const auto padded = padded_blocks(live, static_cast<int64_t>(blocks.size()));
    int64_t settled_kept = 0;
    std::vector<int64_t> kept;
    tokens.clear();
    parents.clear();
    for (size_t a = 0; a < blocks.size(); ++a) {
      const auto first_row = static_cast<int32_t>(static_cast<int64_t>(a) * beam);
      if (blocks[a] == kSettled) {
        if (settled_kept == padded - live) continue;
        ++settled_kept;
        for (int32_t j = 0; j < beam; ++j) {
          parents.push_back(first_row + j);
          tokens.push_back(kEosId);
        }
      } else {
        const SentenceSearch& s = state[blocks[a]];
        for (int64_t j = 0; j < beam; ++j) {
          const LiveHypothesis& h = s.live[static_cast<size_t>(j) < s.live.size() ? j : 0];
          parents.push_back(first_row + h.parent);
          tokens.push_back(h.tokens.back());
        }
      }
      kept.push_back(blocks[a]);
    }
    blocks = std::move(kept);
    decoder_->reorder(parents);
  }

  std::vector<std::vector<Hypothesis>> out(static_cast<size_t>(sentences));
  for (int64_t i = 0; i < sentences; ++i) {
    std::vector<Hypothesis>& f = state[i].finished;
    // Never an empty list: a row of non-finite logits (a diverged model) may leave no candidate.
    if (f.empty()) f.push_back(Hypothesis{{}, -INFINITY, -INFINITY});
    std::stable_sort(f.begin(), f.end(),
                     [](const Hypothesis& a, const Hypothesis& b) { return a.score > b.score; });
    if (static_cast<int64_t>(f.size()) > beam) f.resize(static_cast<size_t>(beam));
    out[i] = std::move(f);
  }
  return out;
}

int64_t BeamSearch::padded_blocks(int64_t live, int64_t current) const {
  return block_padding_ ? padded_block_count(live, current, options_.beam, StepGraphs::kMaxRows)
                        : live;
}

IncrementalDecoder* BeamSearch::incremental_decoder() {
  return dynamic_cast<IncrementalDecoder*>(decoder_.get());
}

int64_t BeamSearch::candidates_per_row() const {
  return std::min(options_.beam + 1, model_.shape().vocab);
}

void BeamSearch::read_candidates(const Tensor& logits) {  // logits: [rows, vocab]
  const int64_t rows = logits.dim(0), k = candidates_per_row();
  if (logits.device == Device::cuda && k <= kMaxTopK) {
    // On the device, then one small read of ids, logits and stats together.
    const int64_t words = rows * (2 * k + 2);
    auto* base = static_cast<int32_t*>(candidates_.view({words}).data);
    Tensor device_ids(base, DType::i32, Device::cuda, {rows, k});
    Tensor device_top(base + rows * k, DType::f32, Device::cuda, {rows, k});
    Tensor device_stats(base + 2 * rows * k, DType::f32, Device::cuda, {rows, 2});
    logits_top_k(logits, kEosId, device_ids, device_top, device_stats);
    // Into the stream's pinned result slot: one DMA, no staging copy.
    auto* host =
        static_cast<int32_t*>(cuda::stream_resources(cuda::current_stream())
                                  .host_result(static_cast<size_t>(words) * sizeof(int32_t)));
    Tensor all_host(host, DType::i32, Device::cpu, {words});
    copy_tensor(candidates_.view({words}), all_host);
    candidate_ids_host_ = host;
    candidate_values_host_ = reinterpret_cast<const float*>(host + rows * k);
    return;
  }
  host_ids_.resize(static_cast<size_t>(rows * k));
  host_values_.resize(static_cast<size_t>(rows * (k + 2)));  // [rows, k] logits, [rows, 2] stats
  candidate_ids_host_ = host_ids_.data();
  candidate_values_host_ = host_values_.data();
  Tensor ids(host_ids_.data(), DType::i32, Device::cpu, {rows, k});
  Tensor values(host_values_.data(), DType::f32, Device::cpu, {rows, k});
  Tensor stats(host_values_.data() + rows * k, DType::f32, Device::cpu, {rows, 2});
  if (logits.device == Device::cpu && logits.dtype == DType::f32) {
    logits_top_k(logits, kEosId, ids, values, stats);
    return;
  }
  // A beam wider than the device kernel's lists: the whole logits to the host.
  copy_to_host_f32(logits, host_logits_);
  Tensor host_logits(host_logits_.data(), DType::f32, Device::cpu, {rows, logits.dim(1)});
  logits_top_k(host_logits, kEosId, ids, values, stats);
}

DecodePlan plan_decoding(const BeamOptions& beam, int64_t longest_source, int64_t max_positions,
                         int64_t step_rows) {
  // The longest source and its longest translation (bos included), within max_positions; every
  // step holds at least one sentence's beam.
  double longest_target = std::floor(beam.max_len_a * static_cast<double>(longest_source) +
                                     static_cast<double>(beam.max_len_b));
  DecodePlan plan;
  plan.max_len = std::min<int64_t>(
      max_positions,
      std::max<int64_t>(longest_source, static_cast<int64_t>(std::min(longest_target + 1, 1e9))));
  plan.max_rows = planned_rows(step_rows, beam.beam * plan.max_len);
  return plan;
}

}  // namespace nmt
