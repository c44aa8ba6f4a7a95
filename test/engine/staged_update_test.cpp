// The optimizer's staged step (Optimizer::plan_stages ... finish_staged_step, train.
// update_in_backward): updating each backward stage's parameters as soon as its gradients are
// final gives step()'s parameters and moments bit for bit, the same gradient norm, and a
// non-finite stage leaves itself and every later stage untouched.
#include <cmath>
#include <cstring>
#include <vector>

#include "data/batch.h"
#include "engine/model/transformer.h"
#include "engine/train/optimizer.h"
#include "test/support/catch.h"

namespace {

nmt::ModelShape small_shape(bool pre_norm, bool shared) {
  nmt::ModelShape s;
  s.vocab = 31;
  s.d_model = 16;
  s.heads = 2;
  s.ffn_dim = 24;
  s.encoder_layers = 2;
  s.decoder_layers = 2;
  s.dropout = 0.1f;
  s.attention_dropout = 0.1f;
  s.relu_dropout = 0.1f;
  s.pre_norm = pre_norm;
  s.shared_embeddings = shared;
  return s;
}

nmt::Batch batch_at(int step) {
  if (step % 2 == 0)
    return nmt::make_batch({{4, 5, 6, 7}, {8, 9}, {10, 11, 12}}, {{13, 14}, {15, 16, 17}, {18}},
                           {0, 1, 2}, 8);
  return nmt::make_batch({{20, 21}, {22, 23, 24, 25, 26}}, {{27, 28, 29, 30}, {5}}, {0, 1}, 8);
}

std::vector<float> values(const nmt::Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  std::memcpy(out.data(), t.data, out.size() * sizeof(float));
  return out;
}

}  // namespace

TEST_CASE("the staged step gives step()'s parameters and moments bit for bit", "[cpu][optimizer]") {
  for (bool pre_norm : {false, true})
    for (bool shared : {false, true})
      for (nmt::OptimizerKind kind : {nmt::OptimizerKind::adam, nmt::OptimizerKind::lazyadam}) {
        INFO("pre_norm " << pre_norm << ", shared " << shared << ", lazyadam "
                         << (kind == nmt::OptimizerKind::lazyadam));
        const nmt::ModelShape shape = small_shape(pre_norm, shared);
        nmt::Transformer plain(shape, nmt::Device::cpu, 64, 16),
            staged(shape, nmt::Device::cpu, 64, 16);
        plain.params().initialize(5);
        staged.params().initialize(5);
        nmt::OptimizerConfig oc;
        oc.name = kind;
        oc.weight_decay = 0.01;
        nmt::Optimizer plain_opt(plain.params(), oc, nmt::Device::cpu);
        nmt::Optimizer staged_opt(staged.params(), oc, nmt::Device::cpu);
        staged_opt.plan_stages(staged.backward_stages());
        CHECK(staged_opt.staged());
        staged.set_stage_update_hook([&](size_t stage) { staged_opt.update_stage(stage); });
        for (int step = 1; step <= 4; ++step) {
          const nmt::Batch batch = batch_at(step);
          const nmt::StepContext ctx{7, static_cast<uint64_t>(step), true};
          const double lr = 0.001 * step, tokens = static_cast<double>(batch.tgt_tokens());
          plain.zero_grads();
          staged.zero_grads();
          plain.forward_backward(batch, ctx, 0.1f);
          staged_opt.begin_staged_step(step, lr, tokens);
          staged.forward_backward(batch, ctx, 0.1f);
          const nmt::OptimizerStepStats a = plain_opt.step(step, lr, tokens, 0.0);
          const nmt::OptimizerStepStats b = staged_opt.finish_staged_step(tokens);
          INFO("step " << step);
          CHECK_FALSE(a.skipped);
          CHECK_FALSE(b.skipped);
          CHECK(b.grad_norm == Approx(a.grad_norm).epsilon(1e-6));
          CHECK(values(staged.params().master()) == values(plain.params().master()));
          CHECK(values(staged_opt.first_moment()) == values(plain_opt.first_moment()));
          CHECK(values(staged_opt.second_moment()) == values(plain_opt.second_moment()));
        }
      }
}

TEST_CASE("a staged step leaves the stage with a non-finite gradient and every later one as it is",
          "[cpu][optimizer]") {
  nmt::Transformer model(small_shape(false, true), nmt::Device::cpu, 64, 16);
  model.params().initialize(5);
  nmt::Optimizer opt(model.params(), nmt::OptimizerConfig{}, nmt::Device::cpu);
  const auto& stages = model.backward_stages();
  opt.plan_stages(stages);
  nmt::Tensor grads = model.params().grads();
  float* g = static_cast<float*>(grads.data);
  for (int64_t i = 0; i < grads.numel(); ++i) g[i] = 0.25f;
  // The second stage with parameters gets a NaN (the first may be empty: a shared table's).
  size_t first = 0;
  while (first < stages.size() && stages[first].empty()) ++first;
  size_t bad = first + 1;
  while (bad < stages.size() && stages[bad].empty()) ++bad;
  REQUIRE(bad < stages.size());
  g[stages[bad].front()->offset] = NAN;
  const std::vector<float> before = values(model.params().master());
  opt.begin_staged_step(1, 0.01, 10.0);
  for (size_t s = 0; s < stages.size(); ++s) opt.update_stage(s);
  const nmt::OptimizerStepStats st = opt.finish_staged_step(10.0);
  CHECK(st.skipped);
  CHECK_FALSE(std::isfinite(st.grad_norm));
  const std::vector<float> after = values(model.params().master());
  for (size_t s = 0; s < stages.size(); ++s)
    for (const nmt::Param* p : stages[s]) {
      INFO("stage " << s << " (" << p->name << ")");
      const bool updated = s < bad;
      for (int64_t i = p->offset; i < p->offset + p->numel; ++i)
        if ((after[static_cast<size_t>(i)] != before[static_cast<size_t>(i)]) != updated) {
          FAIL_CHECK("element " << i << (updated ? " not updated" : " updated"));
          break;
        }
    }
  // The next step starts with the flag clear.
  g[stages[bad].front()->offset] = 0.25f;
  opt.begin_staged_step(2, 0.01, 10.0);
  for (size_t s = 0; s < stages.size(); ++s) opt.update_stage(s);
  CHECK_FALSE(opt.finish_staged_step(10.0).skipped);
}
