// The residual dropout's keep mask saved as bits by the sublayers' forward for their backward
// (NMT_LAYERNORM_KEEP_BITS, engine/model/sublayer.h), in whole training steps on the GPU: in bf16
// and f16, post-norm and pre-norm, dropout on, at d_model 128 (the LayerNorm's register path in
// 8-element packs, where the forward stores the mask), a model built with the switch on plans the
// mask buffers (a larger arena) and gives the loss sums and gradient bits of a model built with it
// off, step by step, op by op and replayed from CUDA graphs, with evaluations (no dropout, so no
// mask stored) between the training steps.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "data/batch.h"
#include "engine/model/sublayer.h"
#include "engine/model/transformer.h"
#include "kernels/elementwise.h"
#include "test/engine_cuda/step_test_util.h"
#include "test/support/catch.h"

namespace {

using nmt::Device;

nmt::ModelShape shape_for(nmt::DType dtype, bool pre_norm) {
  return nmt::test::dropout_step_shape(dtype, pre_norm, 2);
}

using nmt::test::batch_of_shape;
using nmt::test::bits_of;

// A model planned with the switch at `keep_bits` (a model reads it once, in its constructor); the
// switch is set back afterwards.
std::unique_ptr<nmt::Transformer> model_with(const nmt::ModelShape& shape, bool keep_bits) {
  const bool before = nmt::layernorm_keep_bits();
  nmt::set_layernorm_keep_bits(keep_bits);
  auto model = std::make_unique<nmt::Transformer>(shape, Device::cuda, 64, 16);
  nmt::set_layernorm_keep_bits(before);
  model->params().initialize(13);
  return model;
}

struct StepOutcome {
  nmt::LossSums loss;
  std::vector<uint32_t> grads;
};

}  // namespace

TEST_CASE("the LayerNorm tails' saved dropout mask gives the drawn mask's gradient bits",
          "[cuda][engine][keep_bits]") {
  for (nmt::DType dtype : {nmt::DType::bf16, nmt::DType::f16}) {
    for (bool pre_norm : {false, true}) {
      const nmt::ModelShape shape = shape_for(dtype, pre_norm);
      const float loss_scale = dtype == nmt::DType::f16 ? 256.0f : 1.0f;
      const auto drawn = model_with(shape, false), saved = model_with(shape, true),
                 graphed = model_with(shape, true);
      graphed->set_train_graphs(true);
      INFO(nmt::dtype_name(dtype) << (pre_norm ? " pre-norm" : " post-norm"));
      // The switch planned the mask buffers (one a sublayer).
      CHECK(saved->arena_bytes() > drawn->arena_bytes());
      // Shapes A B A B A A: the graphed model runs A's first step op by op, captures its second,
      // replays the later ones. An evaluation between steps stores no mask.
      const int shapes[] = {0, 1, 0, 1, 0, 0};
      for (int i = 0; i < 6; ++i) {
        INFO("step " << i);
        const nmt::Batch batch = batch_of_shape(shapes[i]);
        const nmt::StepContext ctx{5, static_cast<uint64_t>(40 + i), true};
        const auto step = [&](nmt::Transformer& model) {
          model.zero_grads();
          StepOutcome out{model.forward_backward(batch, ctx, 0.1f, loss_scale), {}};
          out.grads = bits_of(model.params().grads());
          return out;
        };
        const StepOutcome expected = step(*drawn);
        for (nmt::Transformer* model : {saved.get(), graphed.get()}) {
          INFO((model == graphed.get() ? "CUDA graphs" : "op by op"));
          const StepOutcome got = step(*model);
          CHECK(got.loss.loss == expected.loss.loss);
          CHECK(got.loss.nll == expected.loss.nll);
          CHECK(got.loss.tokens == expected.loss.tokens);
          CHECK(got.grads == expected.grads);
        }
        if (i % 2 == 1) {
          const nmt::Batch other = batch_of_shape(1 - shapes[i]);
          const double loss = drawn->evaluate(other, 0.1f).loss;
          CHECK(saved->evaluate(other, 0.1f).loss == loss);
          CHECK(graphed->evaluate(other, 0.1f).loss == loss);
        }
      }
      const nmt::TrainGraphStats* stats = graphed->train_graph_stats();
      REQUIRE(stats != nullptr);
      INFO("graphs given up: " << stats->failure);
      CHECK(stats->failure.empty());
      CHECK(stats->replays == 4);
    }
  }
}
