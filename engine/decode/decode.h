// Beam search over a Transformer: batched over sentences, the encoder once per group, the decoder
// one position per step with key/value caches (engine/decode/incremental_decoder.h), GNMT length
// penalty, per-sentence length limit, finished hypotheses kept until the best one is settled.
// Algorithm: docs/decoding.md.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/batch.h"
#include "engine/decode/step_decoder.h"
#include "engine/model/arena.h"
#include "engine/model/transformer.h"

namespace nmt {

class IncrementalDecoder;

struct BeamOptions {
  int64_t beam = 4;        // hypotheses kept per sentence; 1 = greedy
  double alpha = 0.6;      // length penalty exponent; 0 ranks by raw log-probability
  double max_len_a = 1.5;  // a sentence gets at most floor(a * source tokens + b) target tokens
  int64_t max_len_b = 10;
};

// Throws std::invalid_argument naming the option when a value is out of range.
void validate_beam_options(const BeamOptions& options);

// Block padding's count (BeamSearch::set_block_padding): the blocks (sentences of `beam` rows) a
// step keeps when `live` of `current` are unsettled: the smallest of 1, 2, 3, 4, 6, 8, 12, 16,
// 24, ... that holds `live`, at most `current`; just `live` where the padded rows would exceed
// `graph_rows` (steps that large replay no CUDA graph, so padding would only cost).
int64_t padded_block_count(int64_t live, int64_t current, int64_t beam, int64_t graph_rows);

// GNMT's length penalty lp(Y) = ((5 + |Y|) / 6)^alpha; |Y| counts the tokens including eos.
double length_penalty(int64_t length, double alpha);

// The most target tokens (eos excluded) a source of `source_tokens` may get: the a·n + b rule,
// bounded by what the model's plan can hold for one sentence with options.beam hypotheses.
int64_t max_target_tokens(const BeamOptions& options, int64_t source_tokens,
                          const Transformer& model);

struct Hypothesis {
  std::vector<int32_t> tokens;  // [length] target ids, no bos, no eos
  double log_prob = 0;          // sum of the token log-probabilities, eos included
  double score = 0;             // log_prob / length_penalty(length + 1, alpha): the ranking
};

// On the GPU the decoder's caches hold up to this many times the model's planned rows, so a group
// may hold more sentences than one training batch's rows of tokens (fewer groups, fewer sequential
// steps: a dev evaluation's decoding is mostly launch-bound steps). At scale 4 the caches take
// (4 * decoder layers + 1) * 4 * max_rows * d_model activations while a search lives (about 1.7 GB
// for Transformer-base over 16k-token plans in bf16); device_cache_scale lowers it to what fits.
inline constexpr int64_t kDeviceCacheScale = 4;

// The cache scale a search on the GPU takes: the largest of kDeviceCacheScale, 2 and 1 whose caches
// (unit_bytes for each unit of scale) take at most half of free_bytes; 1 when none does (the scale
// the decoder always had), so an evaluation during training never claims the memory training needs.
int64_t device_cache_scale(size_t unit_bytes, size_t free_bytes);

class BeamSearch {
 public:
  // The model's plan (max_rows, max_len) bounds every batch: sources are split into groups where
  // sentences * beam * (longest prefix or source) fits, which is also what each decoder cache
  // holds (max_rows positions per layer). Plans the decoder's memory once. Throws on invalid
  // options.
  BeamSearch(Transformer& model, const BeamOptions& options);
  // The same search stepping another decoder (the tests' full-prefix reference,
  // test/support/decode/), which must serve every group the model's plan admits.
  BeamSearch(Transformer& model, const BeamOptions& options, std::unique_ptr<StepDecoder> decoder);

  // One n-best list per source, in input order: up to `beam` finished hypotheses, best first
  // (highest score); never empty (a source whose logits were all non-finite gets one empty
  // hypothesis scored -inf). Empty sources get one empty hypothesis without running the model.
  // Throws std::invalid_argument naming the source when one is longer than the model's planned
  // length.
  std::vector<std::vector<Hypothesis>> search(
      const std::vector<std::vector<int32_t>>& sources);  // [sentences][length] ids, no bos/eos

  // The same for the sources of a padded batch (targets ignored). A batch that fits the plan is
  // decoded as given, padding included, so beam 1 reproduces greedy decoding over whole prefixes
  // exactly (test/support/decode/greedy_decode.h).
  std::vector<std::vector<Hypothesis>> search(const Batch& batch);

  const BeamOptions& options() const { return options_; }
  // Block padding: a settled sentence's rows stay in the batch until the live sentences fit a
  // smaller padded count (padded_block_count), so a step's shape, and the CUDA graph that replays
  // it, lasts many steps. On when the search is built if its decoder replays graphs (a later
  // IncrementalDecoder::set_graphs does not change it). Rows are computed independently: the same
  // hypotheses bit for bit on the CPU; on the GPU a different row count may round differently
  // (cuBLAS picks kernels by shape), as any change of batch does.
  void set_block_padding(bool on) { block_padding_ = on; }
  bool block_padding() const { return block_padding_; }
  // Rows stepped so far for settled sentences' blocks (the padding's cost), and in all.
  int64_t padding_rows() const { return padding_rows_; }
  int64_t stepped_rows() const { return stepped_rows_; }
  // The decoder this search steps when it is the engine's own (its CUDA-graph switch and counters,
  // engine/decode/incremental_decoder.h); nullptr when another StepDecoder was given.
  IncrementalDecoder* incremental_decoder();

 private:
  // Rows one sentence needs at its longest step: beam * max(source, longest prefix).
  int64_t rows_needed(int64_t padded_source, int64_t longest_source) const;
  // Positions each decoder cache holds: max_rows * cache_scale_.
  int64_t cache_rows() const;
  // Whether `sentences` sources (padded length, longest real length) decode as one group: the
  // encoder's plan, a step's rows and the caches all hold them.
  bool group_fits(int64_t sentences, int64_t padded_source, int64_t longest_source) const;
  std::vector<std::vector<Hypothesis>> search_fitting(const Batch& batch);
  // On the GPU: the device buffers of logits_top_k's outputs (max_rows rows).
  void plan_candidates();
  // The blocks (sentences) a step keeps for `live` unsettled sentences out of `current`: live
  // without block padding, else the padded count, never more than current.
  int64_t padded_blocks(int64_t live, int64_t current) const;
  // Tokens each hypothesis offers per step: beam + 1 (enough for beam live ones when one is eos).
  int64_t candidates_per_row() const;
  // Points candidate_ids_host_ ([rows, k]) and candidate_values_host_ ([rows, k] logits, then
  // [rows, 2] log-sum-exp and eos logit) at the candidates of logits ([rows, vocab]), found with
  // logits_top_k on their device (on the GPU: one copy of both into pinned memory).
  void read_candidates(const Tensor& logits);

  Transformer& model_;
  BeamOptions options_;
  // kDeviceCacheScale with the IncrementalDecoder on the GPU; 1 on the CPU and for a given
  // StepDecoder (the tests' full-prefix decoder runs whole prefixes through the model's plan).
  int64_t cache_scale_ = 1;
  std::unique_ptr<StepDecoder> decoder_;  // planned once, for the largest group the plan admits
  bool block_padding_ = false;
  int64_t padding_rows_ = 0, stepped_rows_ = 0;
  Arena candidates_arena_;  // on the GPU: logits_top_k's outputs for max_rows rows
  Buffer candidates_;       // [max_rows * (2k + 2)] words: the ids (i32), then the values (f32)
  std::vector<int32_t> host_ids_;
  std::vector<float> host_values_, host_logits_;
  const int32_t* candidate_ids_host_ = nullptr;   // [rows, k]
  const float* candidate_values_host_ = nullptr;  // [rows, k + 2]
};

// The model's plan for decoding sources of at most `longest_source` tokens: the longest sentence
// (the source, or its longest translation with bos), within max_positions, and the rows a step
// holds (step_rows, at least one sentence's beam). Used by translate_lines and bench-decode.
struct DecodePlan {
  int64_t max_len = 0;
  int64_t max_rows = 0;
};
DecodePlan plan_decoding(const BeamOptions& beam, int64_t longest_source, int64_t max_positions,
                         int64_t step_rows);

}  // namespace nmt
