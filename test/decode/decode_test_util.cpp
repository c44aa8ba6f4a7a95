// Decoding test helpers: scratch directories and the tiny reverse-task model, trained with the
// engine's own step (forward_backward + Adam) and saved with save_checkpoint.
#include "test/decode/decode_test_util.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>

#include "engine/checkpoint/checkpoint.h"
#include "engine/model/model_shape.h"
#include "engine/model/transformer.h"
#include "engine/train/lr_schedule.h"
#include "engine/train/optimizer.h"
#include "engine/train/synthetic_reverse.h"
#include "test/support/tiny_run_config.h"

namespace nmt::test {

RunConfig reverse_config() {
  RunConfig c = tiny_reverse_config();
  c.data.synthetic_train_pairs = 4000;
  c.data.synthetic_dev_pairs = 64;
  c.data.synthetic_vocab = 12;
  c.model.d_model = 48;
  c.model.ffn_dim = 96;
  c.model.dropout = c.model.attention_dropout = c.model.relu_dropout = 0.0;
  c.train.max_steps = kReverseTrainSteps;
  c.train.label_smoothing = 0.0;
  c.lr_schedule.policy = LrPolicy::inverse_sqrt;
  c.lr_schedule.learning_rate = 1e-2;
  c.lr_schedule.warmup_steps = 30;
  return c;
}

const SyntheticReverse& reverse_data() {
  static const RunConfig cfg = reverse_config();
  static const SyntheticReverse data(cfg.data, static_cast<uint64_t>(cfg.train.seed),
                                     cfg.train.batch_tokens, 0);
  return data;
}

const std::string& trained_reverse_checkpoint() {
  static ScratchDir dir("nmt-decode-test");
  static const std::string path = [] {
    RunConfig cfg = reverse_config();
    auto seed = static_cast<uint64_t>(cfg.train.seed);
    SyntheticReverse data(cfg.data, seed, cfg.train.batch_tokens, 0);
    Transformer model(model_shape_from(cfg.model, data.vocab()), Device::cpu,
                      cfg.train.batch_tokens, data.max_padded_len());
    model.params().initialize(seed);
    Optimizer optimizer(model.params(), cfg.optimizer, Device::cpu);
    for (int64_t step = 1; step <= cfg.train.max_steps; ++step) {
      model.zero_grads();
      Batch batch = data.train_batch(step - 1);
      model.forward_backward(batch, StepContext{seed, static_cast<uint64_t>(step), true}, 0.0f);
      optimizer.step(step, learning_rate_at(cfg.lr_schedule, cfg.model.d_model, step),
                     static_cast<double>(batch.tgt_tokens()), 0.0);
    }
    CheckpointState state;
    state.step = cfg.train.max_steps;
    state.seed = seed;
    return save_checkpoint(dir.path(), model.params(), optimizer.first_moment(),
                           optimizer.second_moment(), state, cfg, 0)
        .path;
  }();
  return path;
}

const ReverseText& reverse_text() {
  static ScratchDir dir("nmt-decode-test");
  static const ReverseText text = [] {
    RunConfig cfg = reverse_config();
    ReverseText r;
    r.vocab = dir.file("pieces.txt");
    std::vector<std::string> pieces;
    for (int64_t i = 0; i < cfg.data.synthetic_vocab; ++i)
      pieces.push_back(std::string(1, static_cast<char>('a' + i)));
    write_lines(r.vocab, pieces);
    SyntheticReverse data(cfg.data, static_cast<uint64_t>(cfg.train.seed), cfg.train.batch_tokens,
                          0);
    for (const auto& ids : data.dev_sources()) {
      std::string forward, backward;
      for (size_t i = 0; i < ids.size(); ++i) {
        forward += (i ? " " : "") + pieces[ids[i] - kFirstRegularId];
        backward += (i ? " " : "") + pieces[ids[ids.size() - 1 - i] - kFirstRegularId];
      }
      r.sources.push_back(forward);
      r.reversed.push_back(backward);
    }
    return r;
  }();
  return text;
}

}  // namespace nmt::test
