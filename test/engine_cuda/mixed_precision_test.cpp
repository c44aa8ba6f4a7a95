// Mixed precision on the GPU: a bf16/fp16 step's loss and gradients stay close to the fp32 step,
// fp16 loss scaling unscales exactly, an overflow skips the step and halves the scale, and the tiny
// reversal task trains in bf16 and fp16 as well as in fp32.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "data/batch.h"
#include "engine/config/config.h"
#include "engine/model/transformer.h"
#include "engine/train/optimizer.h"
#include "engine/train/trainer.h"
#include "kernels/elementwise.h"
#include "test/support/catch.h"

namespace {

using nmt::Device;
using nmt::DType;

// head_dim 8 runs the unfused attention; 64 the fused (flash) kernel.
nmt::ModelShape small_shape(DType dtype, int64_t head_dim = 8) {
  nmt::ModelShape s;
  s.vocab = 37;
  s.d_model = 4 * head_dim;
  s.heads = 4;
  s.ffn_dim = 72;
  s.encoder_layers = 2;
  s.decoder_layers = 2;
  s.pre_norm = true;
  s.compute_dtype = dtype;
  return s;
}

nmt::Batch ragged_batch() {
  std::vector<std::vector<int32_t>> src = {
      {4, 5, 6, 7, 8, 9, 10, 11, 12}, {9, 4}, {5, 5, 6, 30, 31}};
  std::vector<std::vector<int32_t>> tgt = {{8, 7, 6, 20}, {4, 9, 10, 5, 36, 35, 34}, {6}};
  return nmt::make_batch(src, tgt, {0, 1, 2}, 8);
}

std::vector<float> to_host(const nmt::Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  nmt::Tensor host(out.data(), DType::f32, Device::cpu, {t.numel()});
  nmt::copy_tensor(t.reshaped({t.numel()}), host);
  return out;
}

// ||a - b|| / ||a|| over the whole flat gradient.
double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    norm += double{a[i]} * a[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

struct StepResult {
  nmt::LossSums loss;
  std::vector<float> grads;
};

// One training step's loss and unscaled gradients; `step` keys the dropout masks.
StepResult one_step(DType dtype, float loss_scale, int64_t head_dim = 8, uint64_t step = 7) {
  nmt::Transformer model(small_shape(dtype, head_dim), Device::cuda, 64, 16);
  model.params().initialize(5);
  model.zero_grads();
  nmt::StepContext ctx{3, step, true};
  StepResult r;
  r.loss = model.forward_backward(ragged_batch(), ctx, 0.1f, loss_scale);
  r.grads = to_host(model.params().grads());
  for (float& g : r.grads) g /= loss_scale;
  return r;
}

}  // namespace

TEST_CASE("a bf16 or fp16 step gives the fp32 step's loss and gradients within rounding",
          "[cuda][engine][mixed]") {
  // bf16 keeps 8 mantissa bits (relative rounding 2^-9), fp16 11 (2^-12); through two layers of
  // GEMMs, norms and softmaxes the gradient error grows to a few dozen roundings. In a model this
  // small one fc1 pre-activation that lands on the other side of 0 in the 16-bit run moves the
  // whole error (the ReLU's derivative jumps from 1 to 0), so one dropout draw is a lottery: over
  // 8 draws (session 12, H100) bf16 gave 0.015 to 0.082 and fp16 0.0013 to 0.047 at head_dim 8.
  // The median of 5 draws measures the rounding, not the lottery.
  // head_dim 64 puts the fused attention kernel in the 16-bit runs (the fp32 one stays unfused).
  constexpr uint64_t kDraws[] = {7, 8, 9, 10, 11};
  for (int64_t head_dim : {8, 64}) {
    for (auto [dtype, loss_scale, tolerance] :
         {std::tuple{DType::bf16, 1.0f, 5e-2}, std::tuple{DType::f16, 1024.0f, 1e-2}}) {
      std::vector<double> errors;
      std::ostringstream all;
      for (uint64_t step : kDraws) {
        const StepResult ref = one_step(DType::f32, 1.0f, head_dim, step);
        const StepResult r = one_step(dtype, loss_scale, head_dim, step);
        INFO(nmt::dtype_name(dtype) << ", head_dim " << head_dim << ", step " << step << ": loss "
                                    << r.loss.loss << " vs fp32 " << ref.loss.loss);
        CHECK(r.loss.tokens == ref.loss.tokens);
        CHECK(r.loss.loss == Approx(ref.loss.loss).epsilon(tolerance / 5));
        errors.push_back(relative_l2(ref.grads, r.grads));
        all << " " << errors.back();
      }
      std::sort(errors.begin(), errors.end());
      const double median = errors[errors.size() / 2];
      INFO(nmt::dtype_name(dtype) << ", head_dim " << head_dim
                                  << ": gradient relative L2 errors of the draws" << all.str());
      CHECK(median < tolerance);
    }
  }
}

TEST_CASE("fp16 loss scaling: scaled gradients unscale to the unscaled ones; overflow skips",
          "[cuda][engine][mixed]") {
  StepResult plain = one_step(DType::f16, 1.0f), scaled = one_step(DType::f16, 256.0f);
  double err = relative_l2(plain.grads, scaled.grads);
  INFO("relative L2 difference of scale 256 vs 1: " << err);
  CHECK(err < 1e-2);

  // A scale past fp16's range makes the logit gradients infinite: the optimizer must skip the
  // step and leave every weight as it was.
  nmt::Transformer model(small_shape(DType::f16), Device::cuda, 64, 16);
  model.params().initialize(5);
  nmt::Optimizer opt(model.params(), nmt::OptimizerConfig{}, Device::cuda);
  std::vector<float> before = to_host(model.params().master());
  model.zero_grads();
  nmt::StepContext ctx{3, 1, true};
  double tokens =
      static_cast<double>(model.forward_backward(ragged_batch(), ctx, 0.1f, 1e6f).tokens);
  nmt::OptimizerStepStats st = opt.step(1, 1e-3, tokens * 1e6, 1.0);
  CHECK(st.skipped);
  CHECK(to_host(model.params().master()) == before);
}

TEST_CASE("the tiny reversal task trains in bf16 and fp16 as well as in fp32",
          "[cuda][engine][mixed]") {
  nmt::RunConfig cfg = nmt::load_run_config("configs/tiny-reverse-cpu.json");
  cfg.train.device = Device::cuda;
  // 800 steps: every precision has converged there (with 600, bf16 once ended 3.1 points below
  // fp32 under the torch initialisation while still climbing).
  cfg.train.max_steps = 800;
  cfg.eval.every_steps = 800;
  cfg.eval.samples = 0;
  double fp32_accuracy = 0;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    cfg.train.precision = dtype;
    std::ostringstream log;
    nmt::TrainSummary s = nmt::run_training(cfg, log);
    double accuracy = s.last_eval.greedy_token_accuracy;
    INFO(nmt::dtype_name(dtype) << ": greedy token accuracy " << accuracy << ", log:\n"
                                << log.str());
    if (dtype == DType::f32) fp32_accuracy = accuracy;
    CHECK(accuracy > 0.9);
    CHECK(accuracy > fp32_accuracy - 0.03);
  }
}
