// The residual dropout's keep mask saved as bits by the sublayers' forward for their backward
// (NMT_LAYERNORM_KEEP_BITS, engine/model/sublayer.h), in whole training steps on the GPU: in bf16
// and f16, post-norm and pre-norm, dropout on, at d_model 128 (the LayerNorm's register path in
// 8-element packs, where the forward stores the mask), a model built with the switch on plans the
// mask buffers (a larger arena) and gives the loss sums and gradient bits of a model built with it
// off, step by step, op by op and replayed from CUDA graphs, with evaluations (no dropout, so no
// mask stored) between the training steps.
#include <memory>

#include "engine/model/sublayer.h"
#include "engine/model/transformer.h"
#include "test/engine_cuda/step_test_util.h"
#include "test/support/catch.h"

namespace {

using nmt::Device;

nmt::ModelShape shape_for(nmt::DType dtype, bool pre_norm) {
  return nmt::test::dropout_step_shape(dtype, pre_norm, 2);
}

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
      // An evaluation between steps stores no mask.
      nmt::test::check_steps_match(*drawn, {saved.get(), graphed.get()}, 5, 40, loss_scale);
      const nmt::TrainGraphStats* stats = graphed->train_graph_stats();
      REQUIRE(stats != nullptr);
      INFO("graphs given up: " << stats->failure);
      CHECK(stats->failure.empty());
      CHECK(stats->replays == 4);
    }
  }
}
