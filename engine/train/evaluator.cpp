// Dev-set evaluation: loss over the pairs within the training plan, decoding of every scored line
// (beam search, greedy by default), accuracy or BLEU over the whole file, samples.
#include "engine/train/evaluator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "data/batcher_eval.h"
#include "data/bleu.h"
#include "data/corpus.h"
#include "engine/decode/decode.h"
#include "engine/report/wall_time.h"
#include "kernels/elementwise.h"

namespace nmt {

namespace {

// The padded length a pair takes in a batch (data/batch.h's multiple), at least one block.
int64_t padded(int64_t n) {
  return std::max<int64_t>(1, padded_length(n));
}

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    if (!s.empty()) s += ' ';
    s += std::to_string(id);
  }
  return s;
}

// Target tokens (eos excluded) a source of `length` tokens may get: floor(a·n + b), and the prefix
// (bos + tokens) within max_positions.
int64_t target_limit(const BeamOptions& o, int64_t length, int64_t max_positions) {
  double rule =
      std::floor(o.max_len_a * static_cast<double>(length) + static_cast<double>(o.max_len_b));
  return std::max<int64_t>(
      0, static_cast<int64_t>(std::min(rule, static_cast<double>(max_positions - 1))));
}

// Decodes `sources` (ids, no bos/eos) with `model`, shortest first (similar lengths share a group);
// the best hypothesis of each, in the given order.
std::vector<std::vector<int32_t>> decode_best(Transformer& model, const BeamOptions& o,
                                              const std::vector<std::vector<int32_t>>& sources) {
  if (sources.empty()) return {};
  std::vector<size_t> order(sources.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return sources[a].size() < sources[b].size(); });
  std::vector<std::vector<int32_t>> sorted;
  for (size_t i : order) sorted.push_back(sources[i]);
  std::vector<std::vector<Hypothesis>> found = BeamSearch(model, o).search(sorted);
  std::vector<std::vector<int32_t>> best(sources.size());
  for (size_t k = 0; k < order.size(); ++k) best[order[k]] = std::move(found[k].front().tokens);
  return best;
}

}  // namespace

EvalOptions eval_options_from(const RunConfig& cfg) {
  EvalOptions o;
  o.max_sentences = cfg.eval.max_sentences;
  o.samples = cfg.eval.samples;
  o.max_positions = cfg.model.max_positions;
  return o;  // greedy: see the note the trainer prints for eval.beam > 1
}

EvalResult evaluate_dev(Transformer& model, const TrainingData& data, float label_smoothing,
                        const EvalOptions& options) {
  EvalResult r;
  const BeamOptions& beam = options.decoding;
  validate_beam_options(beam);
  const int64_t max_positions = std::max<int64_t>(options.max_positions, 1);
  r.lines_in_file = data.dev_pairs();
  r.max_positions = max_positions;
  const int64_t n = options.max_sentences > 0 ? std::min(options.max_sentences, r.lines_in_file)
                                              : r.lines_in_file;
  r.sentences = n;
  std::vector<std::vector<int32_t>> sources(static_cast<size_t>(n)), targets(sources.size());
  for (int64_t i = 0; i < n; ++i) data.dev_pair(i, sources[i], targets[i]);

  // Dev loss: teacher forcing over the pairs that fit the training plan, batched by length.
  const auto loss_start = SteadyClock::now();
  InMemoryCorpus fitting;
  for (int64_t i = 0; i < n; ++i)
    if (padded(static_cast<int64_t>(sources[i].size())) <= model.max_len() &&
        padded(static_cast<int64_t>(targets[i].size()) + 1) <= model.max_len())
      fitting.add(sources[i], targets[i]);
  r.loss_sentences = fitting.size();
  double loss = 0, tokens = 0, correct = 0;
  EvalBatcherOptions batching;
  batching.max_tokens = model.max_rows();
  batching.max_sentences = 0;
  batching.pad_multiple = kPadMultiple;
  EvalBatcher batcher(fitting, batching);
  for (Batch b; batcher.next(b);) {
    LossSums s = model.evaluate(b, label_smoothing);
    loss += s.loss;
    tokens += static_cast<double>(s.tokens);
    correct += static_cast<double>(s.correct);
  }
  r.loss = loss / std::max(tokens, 1.0);
  r.token_accuracy = correct / std::max(tokens, 1.0);
  r.loss_seconds = seconds_since(loss_start);

  // Decoding: every line, its source cut to max_positions. A line goes to the training model when
  // its source and its longest translation fit that plan; the others to a model planned for them.
  // Greedy search also takes there a line whose source fits but whose limit (a·n + b) does not:
  // capped at the plan's length, it ends the same way wherever it ends before that cap (its steps
  // up to there are the same), so only a translation that reached the cap is decoded again by the
  // model planned for it. (Beam search keeps the first rule: its beams may still be open where the
  // best finished.) So a second model is built only for what the plan cannot decode.
  const auto decode_start = SteadyClock::now();
  std::vector<std::vector<int32_t>> planned, longer;
  std::vector<int64_t> planned_lines, longer_lines;
  std::vector<int64_t> planned_caps;  // a greedy line's cap below its limit; -1: none
  int64_t longest = 1;                // the longer lines' longest source or prefix
  auto add_longer = [&](std::vector<int32_t> source, int64_t line) {
    const auto length = static_cast<int64_t>(source.size());
    const int64_t prefix = target_limit(beam, length, max_positions) + 1;
    longest = std::max(longest, std::min(std::max(length, prefix), max_positions));
    longer.push_back(std::move(source));
    longer_lines.push_back(line);
  };
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int32_t> source = sources[i];
    if (static_cast<int64_t>(source.size()) > max_positions) {
      source.resize(static_cast<size_t>(max_positions));
      ++r.truncated;
    }
    const auto length = static_cast<int64_t>(source.size());
    const int64_t prefix = target_limit(beam, length, max_positions) + 1;  // bos + tokens
    const int64_t width = std::max(length, prefix);
    const bool whole = length <= model.max_len() && prefix <= model.max_len() &&
                       target_limit(beam, length, model.max_len()) + 1 == prefix &&
                       beam.beam * width <= model.max_rows();
    const bool capped = !whole && beam.beam == 1 && length > 0 && length <= model.max_len() &&
                        length <= model.max_rows() && model.max_len() > 1;
    if (whole || capped) {
      planned_caps.push_back(capped ? max_target_tokens(beam, length, model) : -1);
      planned.push_back(std::move(source));
      planned_lines.push_back(i);
    } else {
      add_longer(std::move(source), i);
    }
  }
  std::vector<std::vector<int32_t>> hyps(static_cast<size_t>(n));
  std::vector<std::vector<int32_t>> best = decode_best(model, beam, planned);
  for (size_t k = 0; k < planned_lines.size(); ++k) {
    if (planned_caps[k] >= 0 && static_cast<int64_t>(best[k].size()) >= planned_caps[k]) {
      add_longer(std::move(planned[k]), planned_lines[k]);  // reached the plan's cap
      ++r.capped_lines;
    } else {
      hyps[planned_lines[k]] = std::move(best[k]);
    }
  }
  if (!longer.empty()) {
    // The same weights in a model whose plan holds the longest of these lines with its beam; it
    // only decodes, so it plans no backward buffers.
    ModelPlan decode_only;
    decode_only.training = false;
    decode_only.queue_weight_grads = false;
    Transformer wide(model.shape(), model.device(), std::max(model.max_rows(), beam.beam * longest),
                     longest, decode_only);
    Tensor master = wide.params().master();
    copy_tensor(model.params().master(), master);
    wide.params().sync_compute();
    best = decode_best(wide, beam, longer);
    for (size_t k = 0; k < longer_lines.size(); ++k) hyps[longer_lines[k]] = std::move(best[k]);
    r.replanned_lines = static_cast<int64_t>(longer.size());
  }
  r.decode_seconds = seconds_since(decode_start);

  // Scores, in file order.
  const Vocab* vocab = data.vocab();
  double hits_total = 0, positions = 0, exact = 0;
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<int32_t>& hyp = hyps[i];
    const std::vector<int32_t>& ref = targets[i];
    const auto ref_len = static_cast<int64_t>(ref.size()),
               hyp_len = static_cast<int64_t>(hyp.size());
    int64_t hits = 0;  // positions 0..ref_len: the reference then eos
    for (int64_t j = 0; j <= ref_len; ++j) {
      int32_t want = j < ref_len ? ref[j] : kEosId;
      int32_t got = j < hyp_len ? hyp[j] : (j == hyp_len ? kEosId : -1);
      hits += want == got ? 1 : 0;
    }
    hits_total += static_cast<double>(hits);
    positions += static_cast<double>(ref_len + 1);
    exact += (hits == ref_len + 1 && hyp_len == ref_len) ? 1 : 0;
    r.hypotheses.push_back(vocab ? vocab->decode(hyp) : ids_text(hyp));
    r.hypothesis_tokens.push_back(hyp_len);
    if (static_cast<int64_t>(r.samples.size()) < options.samples) {
      if (vocab && i < static_cast<int64_t>(data.dev_references().size()) &&
          i < static_cast<int64_t>(data.dev_sources_text().size()))
        r.samples.push_back(
            {data.dev_sources_text()[i], data.dev_references()[i], r.hypotheses.back()});
      else
        r.samples.push_back({ids_text(sources[i]), ids_text(ref), r.hypotheses.back()});
    }
  }
  r.greedy_token_accuracy = hits_total / std::max(positions, 1.0);
  r.greedy_exact = exact / std::max<double>(static_cast<double>(n), 1.0);
  if (vocab && static_cast<int64_t>(data.dev_references().size()) >= n && n > 0) {
    std::vector<std::string> refs(data.dev_references().begin(), data.dev_references().begin() + n);
    BleuStats bleu = corpus_bleu(r.hypotheses, refs);
    r.has_bleu = true;
    r.bleu = bleu.score;
    r.bleu_signature = bleu.signature();
    r.bleu_line = bleu.format();
  }
  return r;
}

}  // namespace nmt
