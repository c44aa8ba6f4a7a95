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
#include "engine/training_data.h"
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

// Sums over one log interval.
struct IntervalStats {
  double loss = 0, tokens = 0, correct = 0, grad_norm = 0;
  int64_t steps = 0;
  Clock::time_point start = Clock::now();
};

static std::string format_step(int64_t step, int64_t epoch, double lr, const IntervalStats& s,
                               double eta_seconds) {
  double secs = seconds_since(s.start);
  char line[360];
  std::snprintf(line, sizeof line,
                "step %lld | epoch %lld | loss %.4f | acc %.2f%% | lr %.3e | gnorm %.3f | "
                "%.1f ms/step | %.0f tok/s | eta %.0f s\n",
                static_cast<long long>(step), static_cast<long long>(epoch),
                s.loss / std::max(s.tokens, 1.0), 100 * s.correct / std::max(s.tokens, 1.0), lr,
                s.grad_norm / std::max<int64_t>(s.steps, 1), 1000 * secs / std::max<int64_t>(s.steps, 1),
                s.tokens / std::max(secs, 1e-9), eta_seconds);
  return line;
}

TrainSummary run_training(const RunConfig& cfg, std::ostream& out) {
  if (cfg.train.precision != DType::f32)
    throw std::runtime_error(std::string("train.precision: ") +
                             std::string(config_name(cfg.train.precision)) +
                             " mixed precision is not built yet; the engine trains in fp32 on the "
                             "CPU and the GPU");
  if (cfg.train.threads > 0) omp_set_num_threads(static_cast<int>(cfg.train.threads));

  auto seed = static_cast<uint64_t>(cfg.train.seed);
  std::unique_ptr<TrainingData> data = make_training_data(cfg, 1, 0);
  int64_t max_len = data->max_padded_len();
  int64_t max_rows = std::max(cfg.train.batch_tokens, max_len);
  Transformer model(model_shape_from(cfg.model, data->vocab_size()), cfg.train.device, max_rows,
                    max_len);
  model.params().initialize(seed);
  Optimizer optimizer(model.params(), cfg.optimizer, cfg.train.device);
  out << "data: " << data->describe() << "\n"
      << "model: " << model.params().total_elements() << " parameters, arena "
      << model.arena_bytes() / (1 << 20) << " MiB, " << omp_get_max_threads() << " threads\n"
      << std::flush;

  TrainSummary summary;
  auto t_start = Clock::now();
  IntervalStats interval;
  auto ls = static_cast<float>(cfg.train.label_smoothing);
  for (int64_t step = 1; step <= cfg.train.max_steps; ++step) {
    model.zero_grads();
    StepContext ctx{seed, static_cast<uint64_t>(step), true};
    double tokens = 0;
    for (int64_t micro = 0; micro < cfg.train.update_freq; ++micro) {
      Batch batch = data->next_train();
      LossSums s = model.forward_backward(batch, ctx, ls);
      tokens += static_cast<double>(data->last_global_tgt_tokens());
      interval.loss += s.loss;
      interval.correct += static_cast<double>(s.correct);
      interval.tokens += static_cast<double>(s.tokens);
    }
    double lr = learning_rate_at(cfg.lr_schedule, cfg.model.d_model, step);
    OptimizerStepStats st = optimizer.step(step, lr, tokens, cfg.train.clip_norm);
    interval.grad_norm += st.grad_norm;
    ++interval.steps;
    summary.steps = step;

    if (step % cfg.log.every_steps == 0 || step == cfg.train.max_steps) {
      double per_step = seconds_since(t_start) / static_cast<double>(step);
      summary.last_loss = interval.loss / std::max(interval.tokens, 1.0);
      out << format_step(step, data->epoch(), lr, interval,
                         per_step * static_cast<double>(cfg.train.max_steps - step))
          << std::flush;
      interval = IntervalStats{};
    }
    bool eval_now = cfg.eval.every_steps > 0 &&
                    (step % cfg.eval.every_steps == 0 || step == cfg.train.max_steps);
    if (eval_now && data->dev_pairs() > 0) {
      summary.last_eval = evaluate_dev(model, *data, ls, cfg.eval.max_sentences, cfg.eval.samples);
      out << format_eval(step, summary.last_eval) << std::flush;
      interval.start = Clock::now();
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
