// Weight-gradient products (the attention's d x d ones; with all, also q | k | v, fc1, fc2) held
// back to the end of backward and run as batched launches (engine/model/weight_grad_queue.h), in
// whole training steps on the GPU: in f32
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

// queue: 0 off, 1 the attention's d x d products, 2 all the queue can take.
std::unique_ptr<nmt::Transformer> model_with(const nmt::ModelShape& shape, int queue) {
  const bool before = nmt::queue_weight_grads(), large_before = nmt::queue_large_weight_grads();
  nmt::set_queue_weight_grads(queue > 0);
  nmt::set_queue_large_weight_grads(queue > 1);
  auto model = std::make_unique<nmt::Transformer>(shape, nmt::Device::cuda, 64, 16);
  nmt::set_queue_weight_grads(before);
  nmt::set_queue_large_weight_grads(large_before);
  model->params().initialize(17);
  return model;
}

bool has(const std::string& name, const char* part) {
  return name.find(part) != std::string::npos;
}

bool queued(const std::string& name, int queue) {
  const bool attention = has(name, "attn.") && has(name, ".weight");
  if (attention && (has(name, "out_proj") || has(name, "encoder_attn.q_proj"))) return true;
  if (queue < 2) return false;
  return (has(name, "self_attn.") && has(name, "_proj.weight")) || has(name, ".fc1.weight") ||
         has(name, ".fc2.weight");
}

}  // namespace

TEST_CASE("queued weight gradients: the same step, the queued products within summation order",
          "[cuda][engine][dw_queue]") {
  for (int queue : {1, 2})
    for (nmt::DType dtype : {nmt::DType::f32, nmt::DType::bf16}) {
      for (bool pre_norm : {false, true}) {
        INFO(nmt::dtype_name(dtype)
             << (pre_norm ? " pre-norm" : " post-norm") << ", queue " << queue);
        const nmt::ModelShape shape = shape_for(dtype, pre_norm);
        const auto plain = model_with(shape, 0), queued_model = model_with(shape, queue),
                   graphed = model_with(shape, queue);
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
          // As the CPU test counts: 11 d x d products; all adds fc1, fc2 (10) and, where the
          // attention runs fused (bf16 here, not f32), the self-attentions' q | k | v (5).
          const bool fused = dtype == nmt::DType::bf16;
          CHECK(plain->queued_weight_grads() == 0);
          CHECK(queued_model->queued_weight_grads() == (queue == 1 ? 11 : fused ? 26 : 21));
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
            if (!queued(pa.name, queue)) {
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
          // Encoder out; decoder self out, cross out and q; with all, also each self-attention's
          // q, k, v and each layer's fc1, fc2.
          CHECK(queued_count == (queue == 1 ? 2 + 3 * 3 : 2 * 6 + 3 * 8));
        }
      }
    }
}
