// The feed-forward blocks' dropout(relu(fc1)) > 0 saved as bits for the backward's ReLU tail
// (NMT_FFN_POSITIVE_BITS, engine/model/feed_forward_block.h), in whole training steps on the GPU:
// in f32, bf16 and f16, post-norm and pre-norm, relu dropout on, a model built with the switch on
// plans the bits (a larger arena), its blocks' backward reads them, and it gives the loss sums and
// gradient bits of a model built with it off (whose tail reads the hidden activations), step by
// step, op by op and replayed from CUDA graphs, with evaluations (no dropout, so no bits written)
// between the training steps.
#include <memory>

#include "engine/model/feed_forward_block.h"
#include "engine/model/transformer.h"
#include "test/engine_cuda/step_test_util.h"
#include "test/support/catch.h"

namespace {

// A model planned with the switch at `bits` (a block reads it where it is planned); the switch is
// set back afterwards.
std::unique_ptr<nmt::Transformer> model_with(const nmt::ModelShape& shape, bool bits) {
  const bool before = nmt::ffn_positive_bits();
  nmt::set_ffn_positive_bits(bits);
  auto model = std::make_unique<nmt::Transformer>(shape, nmt::Device::cuda, 64, 16);
  nmt::set_ffn_positive_bits(before);
  model->params().initialize(17);
  return model;
}

}  // namespace

TEST_CASE(
    "the feed-forward blocks' positive bits give the gradient bits of reading the hidden "
    "activations",
    "[cuda][engine][ffn_positive_bits]") {
  for (nmt::DType dtype : {nmt::DType::f32, nmt::DType::bf16, nmt::DType::f16}) {
    for (bool pre_norm : {false, true}) {
      const nmt::ModelShape shape = nmt::test::dropout_step_shape(dtype, pre_norm, 2);
      const auto from_hidden = model_with(shape, false), from_bits = model_with(shape, true),
                 graphed = model_with(shape, true);
      graphed->set_train_graphs(true);
      INFO(nmt::dtype_name(dtype) << (pre_norm ? " pre-norm" : " post-norm"));
      CHECK(from_bits->arena_bytes() > from_hidden->arena_bytes());  // one mask a block
      const int64_t blocks = shape.encoder_layers + shape.decoder_layers;
      // Op by op, every block of a training step read the bits, none of an evaluation (a replayed
      // graph runs no host code, so it says nothing).
      const auto bits_read = [&](nmt::Transformer& model, nmt::Transformer& reference,
                                 bool evaluated) {
        CHECK(reference.ffn_blocks_with_positive_bits() == 0);
        if (&model == from_bits.get())
          CHECK(model.ffn_blocks_with_positive_bits() == (evaluated ? 0 : blocks));
      };
      nmt::test::check_steps_match(*from_hidden, {from_bits.get(), graphed.get()}, 7, 60,
                                   dtype == nmt::DType::f16 ? 256.0f : 1.0f, bits_read);
      const nmt::TrainGraphStats* stats = graphed->train_graph_stats();
      REQUIRE(stats != nullptr);
      INFO("graphs given up: " << stats->failure);
      CHECK(stats->failure.empty());
      CHECK(stats->replays == 4);
    }
  }
}
