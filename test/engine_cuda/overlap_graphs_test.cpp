// A training step with a grad-ready hook (the exchange overlapping backward) and CUDA graphs on:
// the step is captured as graph segments cut where the hook's ExchangeProgress grows (reporting
// the finished stages would start an exchange), and every replay reports the same parameters in the
// same order as the op-by-op step, each with its final gradient bits at the moment it is reported
// (the queued weight gradients and deferred second passes flushed before). The gradients are the
// op-by-op hooked step's bits, and those of a step without a hook to the last bits of the queued
// products' grouping. NMT_OVERLAP_CAPTURE=0 (set_overlap_capture) runs hooked steps op by op.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/model/transformer.h"
#include "test/engine_cuda/step_test_util.h"
#include "test/support/catch.h"

namespace {

using nmt::Device;
using nmt::test::batch_of_shape;
using nmt::test::bits_of;

// What a hook saw in one step: each reported parameter's offset and its gradient's bits then, and
// how many times the exchange's progress grew.
struct Reports {
  std::vector<int64_t> offsets;
  std::vector<std::vector<uint32_t>> grads;
  int starts = 0;
};

// Sets a hook that records into `r` (waiting for the device at each report, to read the gradient
// as it is then) and an ExchangeProgress that counts the quarters of all gradient elements
// finished (`starts`: how many times it grew): a few cuts a step.
void hook_recording(nmt::Transformer& model, Reports& r) {
  const int64_t quarter = model.params().total_elements() / 4;
  model.set_grad_ready_hook(
      [&r](const nmt::Param& p) {
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        r.offsets.push_back(p.offset);
        r.grads.push_back(bits_of(p.grad));
      },
      [&r, quarter, last = 0](const std::vector<const nmt::Param*>& finished) mutable {
        int64_t elements = 0;
        for (const nmt::Param* p : finished) elements += p->numel;
        const int progress = static_cast<int>(elements / quarter);
        if (progress > last) ++r.starts;
        last = progress;
        return progress;
      });
}

// max |a - b| over two gradient buffers; *largest = max |b|.
double max_abs_difference(const nmt::Tensor& a, const nmt::Tensor& b, double* largest) {
  const std::vector<float> x = nmt::test::values_of(a), y = nmt::test::values_of(b);
  double worst = 0;
  *largest = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    worst = std::fmax(worst, std::fabs(static_cast<double>(x[i]) - y[i]));
    *largest = std::fmax(*largest, std::fabs(static_cast<double>(y[i])));
  }
  return worst;
}

}  // namespace

TEST_CASE("a hooked step from graph segments reports what the op-by-op step reports",
          "[cuda][engine][graphs][ddp]") {
  for (nmt::DType dtype : {nmt::DType::f32, nmt::DType::bf16}) {
    for (bool pre_norm : {false, true}) {
      INFO(nmt::dtype_name(dtype) << (pre_norm ? " pre-norm" : " post-norm"));
      const nmt::ModelShape shape = nmt::test::dropout_step_shape(dtype, pre_norm, 2);
      nmt::Transformer eager(shape, Device::cuda, 64, 16), graphed(shape, Device::cuda, 64, 16),
          plain(shape, Device::cuda, 64, 16);
      for (nmt::Transformer* m : {&eager, &graphed, &plain}) m->params().initialize(11);
      graphed.set_train_graphs(true);
      const size_t params = eager.params().params().size();
      // Shapes A B A B A A: A's first step op by op, its second captured, later ones replayed.
      const int shapes[] = {0, 1, 0, 1, 0, 0};
      for (int i = 0; i < 6; ++i) {
        INFO("step " << i);
        const nmt::Batch batch = batch_of_shape(shapes[i]);
        const nmt::StepContext ctx{3, static_cast<uint64_t>(100 + i), true};
        Reports expected, got;
        hook_recording(eager, expected);
        hook_recording(graphed, got);
        for (nmt::Transformer* m : {&eager, &graphed, &plain}) m->zero_grads();
        const nmt::LossSums a = eager.forward_backward(batch, ctx, 0.1f);
        const nmt::LossSums b = graphed.forward_backward(batch, ctx, 0.1f);
        const nmt::LossSums c = plain.forward_backward(batch, ctx, 0.1f);
        eager.set_grad_ready_hook(nullptr);
        graphed.set_grad_ready_hook(nullptr);
        CHECK(b.loss == a.loss);
        CHECK(c.loss == a.loss);
        CHECK(bits_of(graphed.params().grads()) == bits_of(eager.params().grads()));
        // Every parameter once, in the op-by-op order, its gradient final when reported.
        REQUIRE(expected.offsets.size() == params);
        CHECK(got.offsets == expected.offsets);
        CHECK(got.grads == expected.grads);
        CHECK(expected.starts >= 2);
        for (size_t k = 0; k < expected.offsets.size(); ++k) {
          const nmt::Param* p = nullptr;
          for (const nmt::Param& q : eager.params().params())
            if (q.offset == expected.offsets[k]) p = &q;
          REQUIRE(p != nullptr);
          INFO(p->name);
          CHECK(expected.grads[k] == bits_of(p->grad));
        }
        // Without a hook the queue runs its products in other groups: the same sums to rounding.
        double largest = 0;
        const double worst =
            max_abs_difference(plain.params().grads(), eager.params().grads(), &largest);
        CHECK(worst <= 1e-5 * largest);
        if (i == 2) {  // the capture: one segment per report, and the rest of the step
          const nmt::TrainGraphStats* stats = graphed.train_graph_stats();
          REQUIRE(stats != nullptr);
          CHECK(stats->graph_segments == static_cast<size_t>(expected.starts + 2));
        }
      }
      const nmt::TrainGraphStats* stats = &nmt::test::check_abab_graph_counts(graphed);
      CHECK(stats->overlapped == 0);

      // NMT_OVERLAP_CAPTURE=0: op by op, no queue, every stage reported as it finishes.
      nmt::set_overlap_capture(false);
      Reports old;
      hook_recording(graphed, old);
      graphed.zero_grads();
      eager.zero_grads();
      graphed.forward_backward(batch_of_shape(0), nmt::StepContext{3, 200, true}, 0.1f);
      eager.forward_backward(batch_of_shape(0), nmt::StepContext{3, 200, true}, 0.1f);
      graphed.set_grad_ready_hook(nullptr);
      nmt::set_overlap_capture(true);
      CHECK(old.offsets.size() == params);
      CHECK(old.starts == 0);
      CHECK(graphed.queued_weight_grads() == 0);
      CHECK(stats->overlapped == 1);
      double largest = 0;
      CHECK(max_abs_difference(graphed.params().grads(), eager.params().grads(), &largest) <=
            1e-5 * largest);
    }
  }
}
