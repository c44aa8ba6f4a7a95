// The attention blocks' d x d weight-gradient products held back to the end of backward and run as
// batched launches (engine/model/weight_grad_queue.h), in whole training steps on the GPU: in f32
// and bf16, post-norm and pre-norm, dropout on, against a model planned without the queue. The
// loss and every other gradient keep their bits (nothing in backward reads a weight gradient); the
// queued ones (out projections, cross-attention's q) move only by the batch kernel's summation
// order. Replayed from CUDA graphs, the queued step gives the op-by-op queued step's bits.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "data/batch.h"
#include "engine/model/transformer.h"
#include "test/engine_cuda/step_test_util.h"
#include "test/support/catch.h"

namespace {

nmt::ModelShape shape_for(nmt::DType dtype, bool pre_norm) {
  return nmt::test::dropout_step_shape(dtype, pre_norm, 3);
}

std::unique_ptr<nmt::Transformer> model_with(const nmt::ModelShape& shape, bool queue) {
  nmt::set_queue_weight_grads(queue);
  auto model = std::make_unique<nmt::Transformer>(shape, nmt::Device::cuda, 64, 16);
  nmt::set_queue_weight_grads(true);
  model->params().initialize(17);
  return model;
}

bool queued(const std::string& name) {
  const bool attention = name.find("attn.") != std::string::npos;
  const bool out_weight = name.find("out_proj.weight") != std::string::npos;
  const bool cross_q = name.find("encoder_attn.q_proj.weight") != std::string::npos;
  return attention && (out_weight || cross_q);
}

}  // namespace

TEST_CASE("queued weight gradients: the same step, the queued products within summation order",
          "[cuda][engine][dw_queue]") {
  for (nmt::DType dtype : {nmt::DType::f32, nmt::DType::bf16}) {
    for (bool pre_norm : {false, true}) {
      INFO(nmt::dtype_name(dtype) << (pre_norm ? " pre-norm" : " post-norm"));
      const nmt::ModelShape shape = shape_for(dtype, pre_norm);
      const auto plain = model_with(shape, false), queued_model = model_with(shape, true),
                 graphed = model_with(shape, true);
      graphed->set_train_graphs(true);
      CHECK(queued_model->arena_bytes() > plain->arena_bytes());
      const int shapes[] = {0, 1, 0, 0};  // the graphed model captures shape 0 at its second step
      for (int i = 0; i < 4; ++i) {
        INFO("step " << i);
        const nmt::Batch batch = nmt::test::batch_of_shape(shapes[i]);
        const nmt::StepContext ctx{9, static_cast<uint64_t>(20 + i), true};
        auto run = [&](nmt::Transformer& model) {
          model.zero_grads();
          return model.forward_backward(batch, ctx, 0.1f);
        };
        const nmt::LossSums a = run(*plain), b = run(*queued_model), c = run(*graphed);
        CHECK(b.loss == a.loss);
        CHECK(c.loss == b.loss);
        int queued_count = 0;
        for (size_t p = 0; p < plain->params().params().size(); ++p) {
          const nmt::Param& pa = plain->params().params()[p];
          const nmt::Param& pb = queued_model->params().params()[p];
          const nmt::Param& pc = graphed->params().params()[p];
          INFO(pa.name);
          REQUIRE(pa.name == pb.name);
          const std::vector<uint32_t> ga = nmt::test::bits_of(pa.grad),
                                      gb = nmt::test::bits_of(pb.grad),
                                      gc = nmt::test::bits_of(pc.grad);
          CHECK(gc == gb);
          if (!queued(pa.name)) {
            CHECK(gb == ga);
            continue;
          }
          ++queued_count;
          double diff = 0, norm = 0;
          for (size_t k = 0; k < ga.size(); ++k) {
            float x, y;
            std::memcpy(&x, &ga[k], 4);
            std::memcpy(&y, &gb[k], 4);
            diff += (double(x) - y) * (double(x) - y);
            norm += double(x) * x;
          }
          CHECK(std::sqrt(diff) <= 1e-5 * std::sqrt(norm) + 1e-30);
        }
        CHECK(queued_count == 2 + 3 * 3);  // encoder out; decoder self out, cross out and q
      }
    }
  }
}
