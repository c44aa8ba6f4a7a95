// The training loop: steps, logging, evaluation.
#include "engine/trainer.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "engine/lr_schedule.h"
#include "engine/optimizer.h"
#include "engine/synthetic_reverse.h"
#include "engine/transformer.h"

namespace nmt {

using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

ModelShape model_shape_from(const ModelConfig& m, int64_t vocab) {
  ModelShape s;
  s.vocab = vocab;
  s.d_model = m.d_model;
  s.heads = m.num_heads;
  s.ffn_dim = m.ffn_dim;
  s.encoder_layers = m.encoder_layers;
  s.decoder_layers = m.decoder_layers;
  s.dropout = static_cast<float>(m.dropout);
  s.attention_dropout = static_cast<float>(m.attention_dropout);
  s.relu_dropout = static_cast<float>(m.relu_dropout);
  s.layernorm_eps = static_cast<float>(m.layernorm_eps);
  s.pre_norm = m.norm == NormPosition::pre;
  s.shared_embeddings = m.shared_embeddings;
  return s;
}

static EvalResult evaluate_synthetic(Transformer& model, const SyntheticReverse& data,
                                     float label_smoothing) {
  EvalResult r;
  int64_t per_batch = std::max<int64_t>(1, model.max_rows() / model.max_len());
  double loss = 0, tokens = 0, correct = 0, greedy_correct = 0, exact = 0;
  for (const Batch& b : data.dev_batches(per_batch)) {
    LossSums s = model.evaluate(b, label_smoothing);
    loss += s.loss;
    tokens += static_cast<double>(s.tokens);
    correct += static_cast<double>(s.correct);
    auto decoded = model.greedy_decode(b, b.tgt_len);
    for (int64_t i = 0; i < b.sentences; ++i) {
      const int32_t* ref = b.tgt_out.data() + i * b.tgt_len;  // y_1..y_n, eos
      const auto& hyp = decoded[i];
      int64_t n = b.tgt_lengths[i] - 1, hits = 0;
      for (int64_t j = 0; j <= n; ++j) {
        int32_t h = j < static_cast<int64_t>(hyp.size()) ? hyp[j] : (j == static_cast<int64_t>(hyp.size()) ? kEosId : -1);
        hits += h == ref[j];
      }
      greedy_correct += static_cast<double>(hits);
      exact += hits == n + 1 && static_cast<int64_t>(hyp.size()) == n;
      ++r.sentences;
    }
  }
  r.loss = loss / std::max(tokens, 1.0);
  r.token_accuracy = correct / std::max(tokens, 1.0);
  r.greedy_token_accuracy = greedy_correct / std::max(tokens, 1.0);
  r.greedy_exact = exact / std::max<double>(static_cast<double>(r.sentences), 1.0);
  return r;
}

static void print_eval(std::ostream& out, int64_t step, const EvalResult& e) {
  char line[256];
  std::snprintf(line, sizeof line,
                "eval step %lld | dev loss %.4f | dev acc %.2f%% | greedy token acc %.2f%% | "
                "exact %.2f%% | %lld sentences\n",
                static_cast<long long>(step), e.loss, 100 * e.token_accuracy,
                100 * e.greedy_token_accuracy, 100 * e.greedy_exact,
                static_cast<long long>(e.sentences));
  out << line << std::flush;
}

TrainSummary run_training(const RunConfig& cfg, std::ostream& out) {
  if (cfg.train.device != Device::cpu)
    throw std::runtime_error("train.device: the CUDA training path is not built yet; use \"cpu\"");
  if (cfg.train.precision != DType::f32)
    throw std::runtime_error("train.precision: the CPU backend trains in fp32 only");
  if (!cfg.data.train_is_synthetic())
    throw std::runtime_error("data.train: training from nmt-prep shards is not wired into nmt-train yet");
  if (cfg.train.threads > 0) omp_set_num_threads(static_cast<int>(cfg.train.threads));

  auto seed = static_cast<uint64_t>(cfg.train.seed);
  SyntheticReverse data(cfg.data, seed, cfg.train.batch_tokens, cfg.train.max_sentences);
  int64_t max_len = data.max_padded_len();
  int64_t max_rows = std::max(cfg.train.batch_tokens, max_len);
  Transformer model(model_shape_from(cfg.model, data.vocab()), cfg.train.device, max_rows, max_len);
  model.params().initialize(seed);
  Optimizer optimizer(model.params(), cfg.optimizer, cfg.train.device);
  out << "model: " << model.params().total_elements() << " parameters, vocab " << data.vocab()
      << ", arena " << model.arena_bytes() / (1 << 20) << " MiB, " << data.train_pairs()
      << " train pairs, " << cfg.data.synthetic_dev_pairs << " held-out pairs\n";

  TrainSummary summary;
  auto t_start = Clock::now();
  auto t_interval = Clock::now();
  double int_loss = 0, int_tokens = 0, int_correct = 0, int_norm = 0;
  int64_t int_steps = 0;
  auto ls = static_cast<float>(cfg.train.label_smoothing);
  for (int64_t step = 1; step <= cfg.train.max_steps; ++step) {
    model.zero_grads();
    StepContext ctx{seed, static_cast<uint64_t>(step), true};
    double tokens = 0;
    for (int64_t micro = 0; micro < cfg.train.update_freq; ++micro) {
      Batch batch = data.train_batch((step - 1) * cfg.train.update_freq + micro);
      LossSums s = model.forward_backward(batch, ctx, ls);
      tokens += static_cast<double>(s.tokens);
      int_loss += s.loss;
      int_correct += static_cast<double>(s.correct);
    }
    int_tokens += tokens;
    double lr = learning_rate_at(cfg.lr_schedule, cfg.model.d_model, step);
    OptimizerStepStats st = optimizer.step(step, lr, tokens, cfg.train.clip_norm);
    int_norm += st.grad_norm;
    ++int_steps;
    summary.steps = step;

    if (step % cfg.log.every_steps == 0 || step == cfg.train.max_steps) {
      double secs = seconds_since(t_interval);
      summary.last_loss = int_loss / std::max(int_tokens, 1.0);
      char line[320];
      std::snprintf(line, sizeof line,
                    "step %lld | loss %.4f | acc %.2f%% | lr %.3e | gnorm %.3f | %.1f ms/step | "
                    "%.0f tok/s\n",
                    static_cast<long long>(step), summary.last_loss,
                    100 * int_correct / std::max(int_tokens, 1.0), lr, int_norm / int_steps,
                    1000 * secs / int_steps, int_tokens / std::max(secs, 1e-9));
      out << line << std::flush;
      int_loss = int_tokens = int_correct = int_norm = 0;
      int_steps = 0;
      t_interval = Clock::now();
    }
    bool eval_now = cfg.eval.every_steps > 0 &&
                    (step % cfg.eval.every_steps == 0 || step == cfg.train.max_steps);
    if (eval_now) {
      summary.last_eval = evaluate_synthetic(model, data, ls);
      print_eval(out, step, summary.last_eval);
      t_interval = Clock::now();
    }
  }
  summary.wall_seconds = seconds_since(t_start);
  char line[160];
  std::snprintf(line, sizeof line, "done: %lld steps in %.1f s\n",
                static_cast<long long>(summary.steps), summary.wall_seconds);
  out << line;
  return summary;
}

}  // namespace nmt
