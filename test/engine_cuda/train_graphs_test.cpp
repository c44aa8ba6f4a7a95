// Training steps replayed from CUDA graphs (Transformer::set_train_graphs) against the same steps
// run op by op: the same loss sums and the same gradient bits, at every step of two interleaved
// batch shapes, with dropout on everywhere (a replay must draw its own step's masks), in fp32 and
// in bf16 at a head size that takes the fused attention kernels, with a shape's graph captured
// behind its first step (the default) and at its second; a step with a grad-ready hook is a key of
// its own.
#include "engine/model/train_graphs.h"

#include <cstdint>
#include <cstring>
#include <tuple>
#include <vector>

#include "data/batch.h"
#include "engine/model/transformer.h"
#include "kernels/elementwise.h"
#include "test/engine_cuda/step_test_util.h"
#include "test/support/catch.h"

namespace {

using nmt::Device;

nmt::ModelShape shape_for(nmt::DType dtype) {
  nmt::ModelShape s;
  s.vocab = 101;
  s.d_model = dtype == nmt::DType::f32 ? 32 : 128;
  s.heads = 2;  // head size 16 (the generic kernels) or 64 (the fused ones)
  s.ffn_dim = 2 * s.d_model + 8;
  s.encoder_layers = 2;
  s.decoder_layers = 2;
  s.dropout = 0.1f;
  s.attention_dropout = 0.1f;
  s.relu_dropout = 0.1f;
  s.compute_dtype = dtype;
  return s;
}

using nmt::test::batch_of_shape;
using nmt::test::bits_of;

}  // namespace

TEST_CASE("training steps replayed from CUDA graphs give the op-by-op steps' bits",
          "[cuda][engine][graphs]") {
  for (const auto& [dtype, pre_norm, first_sight] :
       {std::tuple{nmt::DType::f32, false, true}, std::tuple{nmt::DType::f32, true, false},
        std::tuple{nmt::DType::bf16, false, false}, std::tuple{nmt::DType::bf16, true, true}}) {
    nmt::set_capture_at_first_sight(first_sight);
    nmt::ModelShape shape = shape_for(dtype);
    shape.pre_norm = pre_norm;
    nmt::Transformer eager(shape, Device::cuda, 64, 16), graphed(shape, Device::cuda, 64, 16);
    eager.params().initialize(11);
    graphed.params().initialize(11);
    graphed.set_train_graphs(true);
    // Shapes A B A B A A: A's first step op by op, later ones replayed.
    const int shapes[] = {0, 1, 0, 1, 0, 0};
    for (int i = 0; i < 6; ++i) {
      const nmt::Batch batch = batch_of_shape(shapes[i]);
      const nmt::StepContext ctx{3, static_cast<uint64_t>(100 + i), true};
      eager.zero_grads();
      graphed.zero_grads();
      const nmt::LossSums a = eager.forward_backward(batch, ctx, 0.1f);
      const nmt::LossSums b = graphed.forward_backward(batch, ctx, 0.1f);
      INFO(nmt::dtype_name(dtype) << (pre_norm ? " pre-norm" : " post-norm") << ", step " << i
                                  << (first_sight ? ", captured at first sight" : ""));
      CHECK(b.loss == a.loss);
      CHECK(b.nll == a.nll);
      CHECK(b.tokens == a.tokens);
      CHECK(b.correct == a.correct);
      CHECK(bits_of(graphed.params().grads()) == bits_of(eager.params().grads()));
      // Step 0 ran A op by op; captured behind it, or only at A's second step (step 2).
      if (i == 0) CHECK(graphed.train_graph_stats()->captures == (first_sight ? 1 : 0));
    }
    const nmt::TrainGraphStats* stats = &nmt::test::check_abab_graph_counts(graphed);
    CHECK(stats->graph_nodes > 50);
    CHECK(eager.train_graph_stats() == nullptr);

    // A step with a grad-ready hook (the exchange overlapping backward) is a key of its own
    // (its graph is cut where it reports; overlap_graphs_test.cpp): its first step runs op by
    // op, and reports every parameter.
    int64_t reported = 0;
    graphed.set_grad_ready_hook([&](const nmt::Param&) { ++reported; });
    graphed.zero_grads();
    graphed.forward_backward(batch_of_shape(0), nmt::StepContext{3, 200, true}, 0.1f);
    graphed.set_grad_ready_hook(nullptr);
    CHECK(reported == static_cast<int64_t>(graphed.params().params().size()));
    CHECK(stats->replays == 4);
    CHECK(stats->eager_steps == 3);
    CHECK(stats->overlapped == 0);

    // Another seed is another key: its first step runs op by op, with that seed's masks.
    eager.zero_grads();
    graphed.zero_grads();
    const nmt::StepContext reseeded{4, 300, true};
    CHECK(graphed.forward_backward(batch_of_shape(0), reseeded, 0.1f).loss ==
          eager.forward_backward(batch_of_shape(0), reseeded, 0.1f).loss);
    CHECK(bits_of(graphed.params().grads()) == bits_of(eager.params().grads()));
    CHECK(stats->eager_steps == 4);
  }
  nmt::set_capture_at_first_sight(true);
}

TEST_CASE("a CPU model ignores set_train_graphs", "[cuda][engine][graphs]") {
  nmt::Transformer cpu(shape_for(nmt::DType::f32), Device::cpu, 64, 16);
  cpu.set_train_graphs(true);
  CHECK(cpu.train_graph_stats() == nullptr);
}
