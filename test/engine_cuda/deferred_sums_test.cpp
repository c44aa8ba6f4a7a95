// The LayerNorms' and the attention bias sums' second passes deferred to the end of backward
// (set_defer_partial_sums, one launch for all) in whole GPU training steps: the loss and every
// gradient keep the bits of the model that runs each pass at once, op by op and replayed from CUDA
// graphs, f32 and bf16, post- and pre-norm; with a grad-ready hook they run before each report.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/batch.h"
#include "engine/model/transformer.h"
#include "test/engine_cuda/step_test_util.h"
#include "test/support/catch.h"

namespace nmt::cuda::flash {
bool wgmma_kernels_usable();  // kernels/cuda/flash_attention/launch.cuh (a .cuh, not for a .cpp)
}  // namespace nmt::cuda::flash

namespace {

std::unique_ptr<nmt::Transformer> model_with(const nmt::ModelShape& shape, bool defer) {
  const bool before = nmt::defer_partial_sums();
  nmt::set_defer_partial_sums(defer);
  auto model = std::make_unique<nmt::Transformer>(shape, nmt::Device::cuda, 64, 16);
  nmt::set_defer_partial_sums(before);
  model->params().initialize(29);
  return model;
}

}  // namespace

TEST_CASE("deferred LayerNorm second passes: the same step, bit for bit",
          "[cuda][engine][deferral]") {
  for (nmt::DType dtype : {nmt::DType::f32, nmt::DType::bf16})
    for (bool pre_norm : {false, true}) {
      INFO(nmt::dtype_name(dtype) << (pre_norm ? " pre-norm" : " post-norm"));
      const nmt::ModelShape shape = nmt::test::dropout_step_shape(dtype, pre_norm, 3);
      const auto now = model_with(shape, false), later = model_with(shape, true),
                 graphed = model_with(shape, true);
      graphed->set_train_graphs(true);
      CHECK(later->arena_bytes() > now->arena_bytes());
      // Two a encoder layer, three a decoder layer, pre-norm's two final norms; and in bf16 on
      // Hopper, where the short-sentence attention kernels sum the q, k, v bias gradients, one a
      // self-attention and one a cross-attention.
      const int64_t attention_sums =
          dtype == nmt::DType::bf16 && nmt::cuda::flash::wgmma_kernels_usable()
              ? shape.encoder_layers + 2 * shape.decoder_layers
              : 0;
      const int64_t norms =
          2 * shape.encoder_layers + 3 * shape.decoder_layers + (pre_norm ? 2 : 0) + attention_sums;
      const int shapes[] = {0, 1, 0, 0};
      for (int i = 0; i < 4; ++i) {
        INFO("step " << i);
        const nmt::Batch batch = nmt::test::batch_of_shape(shapes[i]);
        const nmt::StepContext ctx{4, static_cast<uint64_t>(60 + i), true};
        auto run = [&](nmt::Transformer& model) {
          model.zero_grads();
          return model.forward_backward(batch, ctx, 0.1f);
        };
        const nmt::LossSums a = run(*now), b = run(*later), c = run(*graphed);
        CHECK(now->deferred_partial_sums() == 0);
        CHECK(later->deferred_partial_sums() == norms);
        CHECK(b.loss == a.loss);
        CHECK(c.loss == a.loss);
        CHECK(nmt::test::grads_differing(*now, *later) == std::vector<std::string>{});
        CHECK(nmt::test::grads_differing(*now, *graphed) == std::vector<std::string>{});
      }
      // With a grad-ready hook (the overlapped exchange reads each stage as backward ends it),
      // the passes recorded so far run before each report: none are left for the end.
      int reported = 0;
      later->set_grad_ready_hook([&](const nmt::Param&) { ++reported; });
      later->zero_grads();
      later->forward_backward(nmt::test::batch_of_shape(0), nmt::StepContext{4, 70, true}, 0.1f);
      later->set_grad_ready_hook(nullptr);
      CHECK(reported > 0);
      CHECK(later->deferred_partial_sums() == 0);
    }
}
