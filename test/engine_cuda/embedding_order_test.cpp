// The embeddings' fused dropout and the batch's row orders (data/batch.h add_row_orders) in whole
// GPU training steps: the same loss and gradient bits as the separate dropout ops with the device's
// sort (NMT_EMBEDDING_FUSED=0), op by op and replayed from CUDA graphs, over interleaved batch
// shapes (so each step's orders are uploaded again), f32 and bf16, post- and pre-norm.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/batch.h"
#include "engine/model/transformer.h"
#include "test/engine_cuda/step_test_util.h"
#include "test/support/catch.h"

TEST_CASE("embedding dropout fused and row orders from the batch: the separate ops' bits",
          "[cuda][engine][embedding]") {
  const bool before = nmt::embedding_fused();
  for (nmt::DType dtype : {nmt::DType::f32, nmt::DType::bf16})
    for (bool pre_norm : {false, true}) {
      INFO(nmt::dtype_name(dtype) << (pre_norm ? " pre-norm" : " post-norm"));
      nmt::ModelShape shape = nmt::test::dropout_step_shape(dtype, pre_norm, 2);
      shape.shared_embeddings = !pre_norm;  // a shared table and separate ones
      auto make = [&] {
        auto model = std::make_unique<nmt::Transformer>(shape, nmt::Device::cuda, 64, 16);
        model->params().initialize(23);
        return model;
      };
      const auto separate = make(), fused = make(), graphed = make();
      graphed->set_train_graphs(true);
      const int shapes[] = {0, 1, 0, 0, 1};
      for (int i = 0; i < 5; ++i) {
        INFO("step " << i);
        nmt::Batch batch = nmt::test::batch_of_shape(shapes[i]);
        nmt::Batch ordered = batch;
        nmt::add_row_orders(ordered);
        REQUIRE(ordered.src_order.size() == 2 * batch.src.size());
        const nmt::StepContext ctx{5, static_cast<uint64_t>(40 + i), true};
        auto run = [&](nmt::Transformer& model, const nmt::Batch& b, bool on) {
          nmt::set_embedding_fused(on);
          model.zero_grads();
          const nmt::LossSums loss = model.forward_backward(b, ctx, 0.1f);
          nmt::set_embedding_fused(before);
          return loss;
        };
        const nmt::LossSums a = run(*separate, ordered, false), b = run(*fused, ordered, true),
                            c = run(*graphed, ordered, true);
        CHECK(b.loss == a.loss);
        CHECK(c.loss == a.loss);
        CHECK(nmt::test::grads_differing(*separate, *fused) == std::vector<std::string>{});
        CHECK(nmt::test::grads_differing(*separate, *graphed) == std::vector<std::string>{});
      }
    }
}
