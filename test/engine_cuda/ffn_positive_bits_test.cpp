// The feed-forward blocks' dropout(relu(fc1)) > 0 saved as bits for the backward's ReLU tail
// (NMT_FFN_POSITIVE_BITS, engine/model/feed_forward_block.h), in whole training steps on the GPU:
// in f32, bf16 and f16, post-norm and pre-norm, relu dropout on, a model built with the switch on
// plans the bits (a larger arena) and gives the loss sums and gradient bits of a model built with
// it off (whose tail reads the hidden activations), step by step, op by op and replayed from CUDA
// graphs, with evaluations (no dropout, so no bits written) between the training steps.
#include <cstdint>
#include <memory>
#include <vector>

#include "data/batch.h"
#include "engine/model/feed_forward_block.h"
#include "engine/model/transformer.h"
#include "test/engine_cuda/step_test_util.h"
#include "test/support/catch.h"

namespace {

using nmt::Device;
using nmt::test::batch_of_shape;
using nmt::test::bits_of;

// A model planned with the switch at `bits` (a block reads it where it is planned); the switch is
// set back afterwards.
std::unique_ptr<nmt::Transformer> model_with(const nmt::ModelShape& shape, bool bits) {
  const bool before = nmt::ffn_positive_bits();
  nmt::set_ffn_positive_bits(bits);
  auto model = std::make_unique<nmt::Transformer>(shape, Device::cuda, 64, 16);
  nmt::set_ffn_positive_bits(before);
  model->params().initialize(17);
  return model;
}

struct StepOutcome {
  nmt::LossSums loss;
  std::vector<uint32_t> grads;
};

}  // namespace

TEST_CASE(
    "the feed-forward blocks' positive bits give the gradient bits of reading the hidden "
    "activations",
    "[cuda][engine][ffn_positive_bits]") {
  for (nmt::DType dtype : {nmt::DType::f32, nmt::DType::bf16, nmt::DType::f16}) {
    for (bool pre_norm : {false, true}) {
      const nmt::ModelShape shape = nmt::test::dropout_step_shape(dtype, pre_norm, 2);
      const float loss_scale = dtype == nmt::DType::f16 ? 256.0f : 1.0f;
      const auto from_hidden = model_with(shape, false), from_bits = model_with(shape, true),
                 graphed = model_with(shape, true);
      graphed->set_train_graphs(true);
      INFO(nmt::dtype_name(dtype) << (pre_norm ? " pre-norm" : " post-norm"));
      CHECK(from_bits->arena_bytes() > from_hidden->arena_bytes());  // one mask a block
      // Shapes A B A B A A: the graphed model runs A's first step op by op, captures its second,
      // replays the later ones.
      const int shapes[] = {0, 1, 0, 1, 0, 0};
      for (int i = 0; i < 6; ++i) {
        INFO("step " << i);
        const nmt::Batch batch = batch_of_shape(shapes[i]);
        const nmt::StepContext ctx{7, static_cast<uint64_t>(60 + i), true};
        const auto step = [&](nmt::Transformer& model) {
          model.zero_grads();
          StepOutcome out{model.forward_backward(batch, ctx, 0.1f, loss_scale), {}};
          out.grads = bits_of(model.params().grads());
          return out;
        };
        const StepOutcome expected = step(*from_hidden);
        CHECK(from_hidden->ffn_blocks_with_positive_bits() == 0);
        for (nmt::Transformer* model : {from_bits.get(), graphed.get()}) {
          INFO((model == graphed.get() ? "CUDA graphs" : "op by op"));
          const StepOutcome got = step(*model);
          // Every block's backward read the bits (op by op; a replayed graph runs no host code).
          if (model == from_bits.get())
            CHECK(model->ffn_blocks_with_positive_bits() ==
                  shape.encoder_layers + shape.decoder_layers);
          CHECK(got.loss.loss == expected.loss.loss);
          CHECK(got.loss.nll == expected.loss.nll);
          CHECK(got.loss.tokens == expected.loss.tokens);
          CHECK(got.grads == expected.grads);
        }
        if (i % 2 == 1) {
          const nmt::Batch other = batch_of_shape(1 - shapes[i]);
          const double loss = from_hidden->evaluate(other, 0.1f).loss;
          CHECK(from_bits->evaluate(other, 0.1f).loss == loss);
          CHECK(from_bits->ffn_blocks_with_positive_bits() == 0);  // no dropout, no bits
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
