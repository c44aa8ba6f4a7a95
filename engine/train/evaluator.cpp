// Dev-set evaluation: loss, greedy decoding (beam search with beam 1), accuracy or BLEU, samples.
#include "engine/train/evaluator.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "data/bleu.h"
#include "engine/decode/decode.h"

namespace nmt {

static std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    if (!s.empty()) s += ' ';
    s += std::to_string(id);
  }
  return s;
}

EvalResult evaluate_dev(Transformer& model, const TrainingData& data, float label_smoothing,
                        int64_t max_sentences, int64_t samples) {
  EvalResult r;
  // Decoding grows each sentence up to ~1.5x its source plus 10 (bounded by the planned length),
  // so dev batches get a third of the planned rows.
  int64_t width = std::max<int64_t>(model.max_len(), model.max_rows() / 3);
  const Vocab* vocab = data.vocab();
  std::vector<std::string> hyps(static_cast<size_t>(data.dev_pairs()));
  std::vector<char> decoded(hyps.size(), 0);
  double loss = 0, tokens = 0, correct = 0, greedy_hits = 0, exact = 0;
  // Greedy: beam 1 picks the argmax (ties to the lower id), each sentence up to 1.5 x its source
  // length + 10 tokens, with the decoder's key/value cache.
  BeamOptions greedy;
  greedy.beam = 1;
  greedy.alpha = 0;
  greedy.max_len_a = 1.5;
  greedy.max_len_b = 10;
  BeamSearch search(model, greedy);
  for (const Batch& b : data.dev_batches(width)) {
    if (max_sentences > 0 && r.sentences >= max_sentences) break;
    LossSums s = model.evaluate(b, label_smoothing);
    loss += s.loss;
    tokens += static_cast<double>(s.tokens);
    correct += static_cast<double>(s.correct);
    std::vector<std::vector<Hypothesis>> out = search.search(b);
    for (int64_t i = 0; i < b.sentences; ++i, ++r.sentences) {
      const int32_t* ref = b.tgt_out.data() + i * b.tgt_len;  // y_1..y_n, eos
      const auto& hyp = out[i].front().tokens;
      auto n = static_cast<int64_t>(b.tgt_lengths[i]) - 1,
           hyp_len = static_cast<int64_t>(hyp.size());
      int64_t hits = 0;
      for (int64_t j = 0; j <= n; ++j)
        hits += (j < hyp_len ? hyp[j] : (j == hyp_len ? kEosId : -1)) == ref[j];
      greedy_hits += static_cast<double>(hits);
      exact += (hits == n + 1 && hyp_len == n) ? 1 : 0;
      size_t id = static_cast<size_t>(b.ids[i]);
      if (vocab && id < hyps.size()) {
        hyps[id] = vocab->decode(hyp);
        decoded[id] = 1;
      }
      if (static_cast<int64_t>(r.samples.size()) < samples) {
        std::vector<int32_t> src(b.src.begin() + i * b.src_len,
                                 b.src.begin() + i * b.src_len + b.src_lengths[i]);
        std::vector<int32_t> tgt(ref, ref + n);
        if (vocab && id < data.dev_references().size())
          r.samples.push_back({data.dev_sources_text()[id], data.dev_references()[id], hyps[id]});
        else
          r.samples.push_back({ids_text(src), ids_text(tgt), ids_text(hyp)});
      }
    }
  }
  r.loss = loss / std::max(tokens, 1.0);
  r.token_accuracy = correct / std::max(tokens, 1.0);
  r.greedy_token_accuracy = greedy_hits / std::max(tokens, 1.0);
  r.greedy_exact = exact / std::max<double>(static_cast<double>(r.sentences), 1.0);
  if (vocab && !data.dev_references().empty()) {
    std::vector<std::string> h, refs;
    for (size_t i = 0; i < hyps.size(); ++i) {
      if (!decoded[i]) continue;
      h.push_back(hyps[i]);
      refs.push_back(data.dev_references()[i]);
    }
    BleuStats bleu = corpus_bleu(h, refs);
    r.has_bleu = true;
    r.bleu = bleu.score;
    r.bleu_signature = bleu.signature();
    r.bleu_line = bleu.format();
  }
  return r;
}


}  // namespace nmt
