// Dev evaluation scores every line of the dev file, as sacreBLEU scores the whole file: lines over
// the training length limits, sources over model.max_positions (cut to it, counted) and empty
// lines, for greedy and beam decoding; eval.max_sentences takes the first N lines.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "data/bleu.h"
#include "data/prep.h"
#include "data/vocab.h"
#include "engine/decode/decode.h"
#include "engine/train/evaluator.h"
#include "engine/train/trainer.h"
#include "engine/train/training_data.h"
#include "kernels/elementwise.h"
#include "test/support/catch.h"
#include "test/support/lib/scratch_dir.h"

namespace {

using nmt::test::read_lines;
using nmt::test::write_lines;

constexpr int64_t kTrainLimit = 16;    // data.max_src_len and data.max_tgt_len
constexpr int64_t kMaxPositions = 48;  // model.max_positions

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& line : lines) s += (s.empty() ? "" : " ") + line;
  return s;
}

// An nmt-prep directory (200-piece SentencePiece vocabulary from 300 Bible pairs) whose dev file
// holds short verses, verses over the training limit, an empty source line and one line of six
// verses, far over max_positions; the training data over it, and an untrained tiny model planned
// for the training limits as nmt-train plans it.
struct Setup {
  nmt::test::ScratchDir dir{"nmt-eval-coverage"};
  nmt::RunConfig cfg;
  std::unique_ptr<nmt::TrainingData> data;
  std::unique_ptr<nmt::Transformer> model;
  std::vector<std::string> dev_sources, dev_references;

  Setup() {
    const std::string corpus = nmt::test::shared_data_dir() + "/bible-en-es/";
    for (const std::string side : {"en", "es"}) {
      write_lines(dir.file("train." + side), read_lines(corpus + "train." + side, 0, 300));
      std::vector<std::string> dev = read_lines(corpus + "dev." + side, 0, 8);
      dev.insert(dev.begin() + 3, side == "en" ? "" : "Y lloró Jesús.");
      dev.push_back(joined(read_lines(corpus + "dev." + side, 8, 6)));
      dev.push_back(side == "en" ? "Jesus wept." : "Jesús lloró.");
      write_lines(dir.file("dev." + side), dev);
    }
    dev_sources = read_lines(dir.file("dev.en"), 0, 100);
    dev_references = read_lines(dir.file("dev.es"), 0, 100);
    nmt::PrepOptions prep;
    prep.train_source = dir.file("train.en");
    prep.train_target = dir.file("train.es");
    prep.dev_source = dir.file("dev.en");
    prep.dev_target = dir.file("dev.es");
    prep.out_dir = dir.file("prep");
    prep.spm.vocab_size = 200;
    prep.threads = 1;
    nmt::run_prep(prep);

    cfg.data.train = cfg.data.dev = prep.out_dir;
    cfg.data.max_src_len = cfg.data.max_tgt_len = kTrainLimit;
    cfg.model.encoder_layers = cfg.model.decoder_layers = 1;
    cfg.model.d_model = 32;
    cfg.model.num_heads = 4;
    cfg.model.ffn_dim = 64;
    cfg.model.max_positions = kMaxPositions;
    cfg.train.device = nmt::Device::cpu;
    cfg.train.precision = nmt::DType::f32;
    cfg.train.batch_tokens = 256;
    data = nmt::make_training_data(cfg, 1, 0);
    const int64_t max_len = data->max_padded_len();
    model = std::make_unique<nmt::Transformer>(nmt::model_shape_from(cfg.model, data->vocab_size()),
                                               nmt::Device::cpu,
                                               std::max(cfg.train.batch_tokens, max_len), max_len);
    model->params().initialize(3);
    // Untrained, the model ends every sentence at once; with eos's (tied) embedding zeroed its
    // logit is 0, below the best of 199 random ones, so outputs run on to their length limit.
    const nmt::Param* embedding = model->params().find("encoder.embed_tokens.weight");
    REQUIRE(embedding != nullptr);
    float* eos_row = embedding->value.f32() + nmt::kEosId * cfg.model.d_model;
    std::fill(eos_row, eos_row + cfg.model.d_model, 0.0f);
  }

  std::vector<int32_t> source(int64_t line) const {
    std::vector<int32_t> src, tgt;
    data->dev_pair(line, src, tgt);
    return src;
  }
};

const Setup& setup() {
  static const Setup s;
  return s;
}

// Each line decoded on its own (its source cut to max_positions) by a model planned for
// max_positions with the same weights: what the evaluation must produce for that line.
std::vector<std::vector<int32_t>> decode_each_alone(const nmt::BeamOptions& o,
                                                    nmt::Transformer* model = nullptr) {
  const Setup& s = setup();
  if (model == nullptr) model = s.model.get();
  nmt::Transformer alone(model->shape(), nmt::Device::cpu, o.beam * kMaxPositions, kMaxPositions);
  nmt::Tensor master = alone.params().master();
  nmt::copy_tensor(model->params().master(), master);
  alone.params().sync_compute();
  nmt::BeamSearch search(alone, o);
  std::vector<std::vector<int32_t>> out;
  for (int64_t i = 0; i < s.data->dev_pairs(); ++i) {
    std::vector<int32_t> src = s.source(i);
    if (static_cast<int64_t>(src.size()) > kMaxPositions) src.resize(kMaxPositions);
    out.push_back(search.search({src}).front().front().tokens);
  }
  return out;
}

// Dev lines whose source fits the setup model's plan but whose limit (floor(1.5 n + 10) tokens
// after bos) does not.
int64_t lines_over_plan_limit() {
  const Setup& s = setup();
  const int64_t max_len = s.model->max_len();
  int64_t count = 0;
  for (int64_t i = 0; i < s.data->dev_pairs(); ++i) {
    auto n = static_cast<int64_t>(s.source(i).size());
    count += n > 0 && n <= max_len && std::floor(1.5 * n + 10) + 1 > max_len ? 1 : 0;
  }
  return count;
}

nmt::EvalOptions options(int64_t beam) {
  nmt::EvalOptions o = nmt::eval_options_from(setup().cfg);
  o.samples = 0;
  o.decoding.beam = beam;
  o.decoding.alpha = beam > 1 ? 0.6 : 0.0;
  return o;
}

void check_every_line_scored(int64_t beam) {
  Setup& s = const_cast<Setup&>(setup());
  const int64_t lines = static_cast<int64_t>(s.dev_sources.size());
  // The dev file has what the rule is about: lines within the training limit, lines over it but
  // within max_positions, lines over max_positions, and an empty source.
  int64_t over_limit = 0, over_positions = 0, fitting = 0, empty = 0;
  for (int64_t i = 0; i < lines; ++i) {
    auto n = static_cast<int64_t>(s.source(i).size());
    over_positions += n > kMaxPositions ? 1 : 0;
    over_limit += n > kTrainLimit && n <= kMaxPositions ? 1 : 0;
    fitting += n > 0 && n <= kTrainLimit ? 1 : 0;
    empty += n == 0 ? 1 : 0;
  }
  REQUIRE(s.data->dev_pairs() == lines);
  REQUIRE(over_positions >= 1);
  REQUIRE(over_limit >= 2);
  REQUIRE(fitting >= 1);
  REQUIRE(empty == 1);

  const int64_t over_plan = lines_over_plan_limit();
  REQUIRE(over_plan >= 1);

  nmt::EvalOptions o = options(beam);
  nmt::EvalResult r = nmt::evaluate_dev(*s.model, *s.data, 0.1f, o);
  // Translations here mostly run to their limit: greedy search tries the lines over the plan in
  // the training model and decodes those that reach the plan's cap there again, in a model planned
  // for them (with the sources the plan cannot hold); beam search sends them there at once.
  if (beam == 1) {
    CHECK(r.capped_lines >= 1);
    CHECK(r.capped_lines <= over_plan);
    CHECK(r.replanned_lines == r.capped_lines + over_limit + over_positions);
  } else {
    CHECK(r.capped_lines == 0);
    CHECK(r.replanned_lines == over_plan + over_limit + over_positions);
  }
  CHECK(r.decode_seconds > 0);
  CHECK(r.loss_seconds > 0);
  CHECK(r.lines_in_file == lines);
  CHECK(r.sentences == lines);
  CHECK(r.truncated == over_positions);
  REQUIRE(static_cast<int64_t>(r.hypotheses.size()) == lines);
  REQUIRE(static_cast<int64_t>(r.hypothesis_tokens.size()) == lines);

  // Line i's hypothesis is line i's translation: decoded alone, the same tokens.
  const std::vector<std::vector<int32_t>> alone = decode_each_alone(o.decoding);
  const nmt::Vocab& vocab = *s.data->vocab();
  for (int64_t i = 0; i < lines; ++i) {
    INFO("dev line " << i << ", " << s.source(i).size() << " source tokens");
    CHECK(r.hypotheses[i] == vocab.decode(alone[i]));
    CHECK(r.hypothesis_tokens[i] == static_cast<int64_t>(alone[i].size()));
    // Within a·n + b of the (cut) source, and the prefix within max_positions.
    auto n = std::min<int64_t>(kMaxPositions, static_cast<int64_t>(s.source(i).size()));
    CHECK(r.hypothesis_tokens[i] <= static_cast<int64_t>(std::floor(1.5 * n + 10)));
    CHECK(r.hypothesis_tokens[i] <= kMaxPositions - 1);
    if (n == 0) CHECK(r.hypotheses[i].empty());
  }
  // The line cut to max_positions runs to the max_positions limit, not to the training plan's.
  CHECK(*std::max_element(r.hypothesis_tokens.begin(), r.hypothesis_tokens.end()) >
        s.model->max_len() - 1);

  // BLEU is the whole file's, every reference included.
  REQUIRE(r.has_bleu);
  CHECK(r.bleu == nmt::corpus_bleu(r.hypotheses, s.dev_references).score);
  // The loss covers the pairs within the training plan.
  CHECK(r.loss_sentences >= fitting);
  CHECK(r.loss_sentences < lines);
  CHECK(std::isfinite(r.loss));
}

}  // namespace

TEST_CASE("greedy dev evaluation scores every dev line, in file order, long sources cut",
          "[engine][eval]") {
  check_every_line_scored(1);
}

TEST_CASE("beam dev evaluation scores every dev line, in file order, long sources cut",
          "[engine][eval]") {
  check_every_line_scored(3);
}

TEST_CASE(
    "greedy evaluation keeps a line over the plan's limit in the training model when its "
    "translation ends before the plan's cap",
    "[engine][eval]") {
  Setup& s = const_cast<Setup&>(setup());
  // A model that ends every translation at once: the decoder's last LayerNorm (post-norm) gives
  // every position the same output, its bias, and eos's output row is that vector scaled up.
  const int64_t max_len = s.model->max_len();
  nmt::Transformer ending(s.model->shape(), nmt::Device::cpu, s.model->max_rows(), max_len);
  ending.params().initialize(3);
  REQUIRE(s.cfg.model.norm == nmt::NormPosition::post);
  const int64_t d = s.cfg.model.d_model;
  auto param = [&](const std::string& name) {
    const nmt::Param* p = ending.params().find(name);
    REQUIRE(p != nullptr);
    return p->value.f32();
  };
  std::fill(param("decoder.layers.0.final_layer_norm.weight"),
            param("decoder.layers.0.final_layer_norm.weight") + d, 0.0f);
  std::fill(param("decoder.layers.0.final_layer_norm.bias"),
            param("decoder.layers.0.final_layer_norm.bias") + d, 1.0f);
  const std::string output = s.model->shape().shared_embeddings
                                 ? "encoder.embed_tokens.weight"
                                 : "decoder.output_projection.weight";
  std::fill(param(output) + nmt::kEosId * d, param(output) + (nmt::kEosId + 1) * d, 10.0f);
  ending.params().sync_compute();
  int64_t unplanned = 0;
  for (int64_t i = 0; i < s.data->dev_pairs(); ++i)
    unplanned += static_cast<int64_t>(s.source(i).size()) > max_len ? 1 : 0;
  REQUIRE(lines_over_plan_limit() >= 1);
  nmt::EvalOptions o = options(1);
  nmt::EvalResult r = nmt::evaluate_dev(ending, *s.data, 0.1f, o);
  CHECK(r.capped_lines == 0);
  CHECK(r.replanned_lines == unplanned);  // only the sources the plan cannot hold
  const std::vector<std::vector<int32_t>> alone = decode_each_alone(o.decoding, &ending);
  REQUIRE(r.hypotheses.size() == alone.size());
  for (size_t i = 0; i < alone.size(); ++i) {
    INFO("dev line " << i);
    CHECK(r.hypotheses[i] == s.data->vocab()->decode(alone[i]));
    CHECK(r.hypothesis_tokens[i] == 0);
  }
}

TEST_CASE("eval.max_sentences scores the first N lines of the dev file", "[engine][eval]") {
  Setup& s = const_cast<Setup&>(setup());
  for (int64_t beam : {1, 3}) {
    nmt::EvalResult all = nmt::evaluate_dev(*s.model, *s.data, 0.1f, options(beam));
    nmt::EvalOptions o = options(beam);
    o.max_sentences = 4;
    o.samples = 4;
    nmt::EvalResult first = nmt::evaluate_dev(*s.model, *s.data, 0.1f, o);
    CHECK(first.sentences == 4);
    CHECK(first.lines_in_file == static_cast<int64_t>(s.dev_sources.size()));
    REQUIRE(first.hypotheses.size() == 4);
    REQUIRE(first.samples.size() == 4);
    for (size_t i = 0; i < 4; ++i) {
      CHECK(first.hypotheses[i] == all.hypotheses[i]);
      CHECK(first.samples[i][0] == s.dev_sources[i]);
      CHECK(first.samples[i][1] == s.dev_references[i]);
      CHECK(first.samples[i][2] == all.hypotheses[i]);
    }
    std::vector<std::string> refs(s.dev_references.begin(), s.dev_references.begin() + 4);
    CHECK(first.bleu == nmt::corpus_bleu(first.hypotheses, refs).score);
  }
}

TEST_CASE("the eval lines say how many lines were scored and warn once about cut sources",
          "[engine][eval]") {
  Setup& s = const_cast<Setup&>(setup());
  nmt::EvalResult r = nmt::evaluate_dev(*s.model, *s.data, 0.1f, options(1));
  const std::string lines = std::to_string(s.dev_sources.size());
  std::string text = nmt::format_eval(100, r);
  INFO(text);
  CHECK(nmt::test::contains(text, lines + " of " + lines + " lines scored"));
  CHECK(nmt::test::contains(text, "| " + lines + " of " + lines + " lines\n"));  // the BLEU line
  const std::string warning =
      "eval step 100 | warning: " + std::to_string(r.truncated) +
      " dev sources longer than model.max_positions = " + std::to_string(kMaxPositions);
  CHECK(nmt::test::contains(text, warning));
  CHECK(text.find("warning") == text.rfind("warning"));
}
