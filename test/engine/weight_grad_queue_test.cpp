// The attention blocks' weight-gradient products held back to the end of backward
// (engine/model/weight_grad_queue.h): the same gradients as run in place, off wherever a
// grad-ready hook reads a layer's gradients during backward, and the queue's grouping.
#include "engine/model/weight_grad_queue.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/batch.h"
#include "engine/model/arena.h"
#include "engine/model/transformer.h"
#include "test/engine/ragged_batch.h"
#include "test/support/catch.h"

namespace {

using nmt::ModelShape;
using nmt::Transformer;

ModelShape small_shape(bool pre_norm, bool fused) {
  ModelShape s;
  s.vocab = 31;
  s.d_model = 16;
  s.heads = 2;
  s.ffn_dim = 24;
  s.encoder_layers = 2;
  s.decoder_layers = 3;
  s.pre_norm = pre_norm;
  s.dropout = 0.2f;
  s.attention_dropout = 0.1f;
  s.cpu_fused_attention = fused;
  return s;
}

using nmt::test::ragged_batch;

// Every gradient after two accumulated backward passes (the queue's products add to what the
// first left), the model's arena size, and how many products the queue ran in the last pass.
// queue: 0 off, 1 the attention's d x d products, 2 all of them.
std::vector<float> gradients(const ModelShape& shape, int queue, size_t* arena_bytes,
                             int64_t* queued) {
  const bool before = nmt::queue_weight_grads(), large_before = nmt::queue_large_weight_grads();
  nmt::set_queue_weight_grads(queue > 0);
  nmt::set_queue_large_weight_grads(queue > 1);
  Transformer model(shape, nmt::Device::cpu, 64, 16);
  nmt::set_queue_weight_grads(before);
  nmt::set_queue_large_weight_grads(large_before);
  *arena_bytes = model.arena_bytes();
  model.params().initialize(5);
  model.zero_grads();
  const nmt::Batch batch = ragged_batch();
  model.forward_backward(batch, nmt::StepContext{3, 2, true}, 0.1f);
  model.forward_backward(batch, nmt::StepContext{3, 3, true}, 0.1f);
  *queued = model.queued_weight_grads();
  const nmt::Tensor g = model.params().grads();
  return std::vector<float>(g.f32(), g.f32() + g.numel());
}

}  // namespace

TEST_CASE("queued weight gradients are the bits of the products run in their layer",
          "[cpu][engine]") {
  for (bool pre_norm : {false, true})
    for (bool fused : {false, true}) {
      INFO("pre_norm " << pre_norm << ", fused attention " << fused);
      const ModelShape shape = small_shape(pre_norm, fused);
      size_t bytes_off = 0, bytes_on = 0, bytes_all = 0;
      int64_t queued_off = -1, queued_on = -1, queued_all = -1;
      const std::vector<float> off = gradients(shape, 0, &bytes_off, &queued_off);
      const std::vector<float> on = gradients(shape, 1, &bytes_on, &queued_on);
      const std::vector<float> all = gradients(shape, 2, &bytes_all, &queued_all);
      // 2 encoder and 3 decoder layers. The d x d products: every out projection (2 + 3 + 3) and
      // cross-attention's q (3); all adds fc1 and fc2 (5 + 5) and, on the fused path, each
      // self-attention's joined q | k | v (2 + 3).
      CHECK(queued_off == 0);
      CHECK(queued_on == 11);
      CHECK(queued_all == (fused ? 26 : 21));
      // The held-back operands have buffers of their own: a larger plan, so the switch took.
      CHECK(bytes_on > bytes_off);
      CHECK(bytes_all > bytes_on);
      REQUIRE(off.size() == on.size());
      REQUIRE(off.size() == all.size());
      CHECK(std::memcmp(off.data(), on.data(), off.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(off.data(), all.data(), off.size() * sizeof(float)) == 0);
    }
}

TEST_CASE("with a grad-ready hook every reported gradient is already final", "[cpu][engine]") {
  // The data-parallel exchange sends a bucket as soon as its parameters are reported: a product
  // still waiting in the queue would send a partial gradient.
  for (bool pre_norm : {false, true}) {
    INFO("pre_norm " << pre_norm);
    const bool large_before = nmt::queue_large_weight_grads();
    nmt::set_queue_large_weight_grads(true);  // every product the queue can take
    Transformer model(small_shape(pre_norm, true), nmt::Device::cpu, 64, 16);
    nmt::set_queue_large_weight_grads(large_before);
    model.params().initialize(5);
    model.zero_grads();
    std::vector<float> at_report(static_cast<size_t>(model.params().total_elements()));
    model.set_grad_ready_hook([&](const nmt::Param& p) {
      std::memcpy(at_report.data() + p.offset, p.grad.f32(), p.numel * sizeof(float));
    });
    model.forward_backward(ragged_batch(), nmt::StepContext{3, 2, true}, 0.1f);
    // Each stage's products ran before its report (report_pending): none were left for the end.
    CHECK(model.queued_weight_grads() == 0);
    const nmt::Tensor g = model.params().grads();
    CHECK(std::memcmp(at_report.data(), g.f32(), at_report.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("the queue runs every product once, grouped by shape, in batches of at most 32",
          "[cpu][engine]") {
  nmt::Arena arena(nmt::Device::cpu, 1 << 20);
  auto filled = [&](const char* name, int64_t rows, int64_t cols, float base) {
    nmt::Tensor t = arena.allocate(name, nmt::DType::f32, rows * cols).view({rows, cols});
    for (int64_t i = 0; i < rows * cols; ++i) t.f32()[i] = base + 0.01f * static_cast<float>(i % 7);
    return t;
  };
  nmt::WeightGradQueue queue;
  const nmt::Tensor x = filled("x", 5, 3, 1.0f), dy = filled("dy", 5, 4, -0.5f);
  const nmt::Tensor x2 = filled("x2", 6, 3, 0.25f), dy2 = filled("dy2", 6, 2, 2.0f);
  CHECK_THROWS_AS(queue.push({dy, x, filled("dw0", 4, 3, 0.0f)}), std::logic_error);
  queue.set_enabled(true);
  std::vector<nmt::Tensor> dws, dws2;
  for (int i = 0; i < 40; ++i) {  // two shapes interleaved; 40 of the first: more than one batch
    dws.push_back(filled("dw", 4, 3, 0.0f));
    queue.push({dy, x, dws.back()});
    if (i % 10 == 0) {
      dws2.push_back(filled("dw2", 2, 3, 1.0f));
      queue.push({dy2, x2, dws2.back()});
    }
  }
  queue.flush();
  CHECK(queue.empty());
  auto expect = [](const nmt::Tensor& dyt, const nmt::Tensor& xt, const nmt::Tensor& dw,
                   float start) {
    const int64_t rows = xt.dim(0), in = xt.dim(1), out = dyt.dim(1);
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) {
        double sum = 0;
        for (int64_t r = 0; r < rows; ++r) sum += dyt.f32()[r * out + o] * xt.f32()[r * in + i];
        const float initial = start + 0.01f * static_cast<float>((o * in + i) % 7);
        CHECK(dw.f32()[o * in + i] == Approx(initial + sum).epsilon(1e-5));
      }
  };
  for (const nmt::Tensor& dw : dws) expect(dy, x, dw, 0.0f);
  for (const nmt::Tensor& dw : dws2) expect(dy2, x2, dw, 1.0f);
}

TEST_CASE("a model planned for decoding plans no backward buffers and evaluates the same loss",
          "[cpu][engine]") {
  for (bool fused : {false, true}) {
    INFO("fused attention " << fused);
    const ModelShape shape = small_shape(true, fused);
    Transformer training(shape, nmt::Device::cpu, 64, 16);
    Transformer decoding(shape, nmt::Device::cpu, 64, 16, nmt::ModelPlan{/*training=*/false});
    CHECK(decoding.arena_bytes() < training.arena_bytes());
    training.params().initialize(5);
    decoding.params().initialize(5);
    const nmt::Batch batch = ragged_batch();
    CHECK(decoding.evaluate(batch, 0.1f).loss == training.evaluate(batch, 0.1f).loss);
    CHECK_THROWS_AS(decoding.forward_backward(batch, nmt::StepContext{3, 2, true}, 0.1f),
                    std::logic_error);
  }
}

TEST_CASE("a plan too large for memory names what makes it smaller", "[cpu][engine]") {
  // 2^44 rows: petabytes, beyond any address space, so the allocation fails even where the
  // kernel overcommits memory.
  const int64_t rows = int64_t{1} << 44;
  try {
    Transformer model(small_shape(false, false), nmt::Device::cpu, rows, 16);
    FAIL("a plan of petabytes was allocated");
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    CHECK(message.find("arena: cannot allocate") != std::string::npos);
    CHECK(message.find("train.batch_tokens") != std::string::npos);
    CHECK(message.find("NMT_QUEUE_LARGE_WEIGHT_GRADS=0") != std::string::npos);
  }
}
