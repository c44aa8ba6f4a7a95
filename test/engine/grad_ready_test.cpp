// The gradient-ready hook that lets the data-parallel exchange overlap backward: every parameter
// is reported exactly once per backward, each backward stage is contiguous in the layout, and the
// stages come in layout order, so gradient buckets fill front to back while backward runs.
#include <algorithm>
#include <vector>

#include "data/batch.h"
#include "engine/model/transformer.h"
#include "test/support/catch.h"

namespace {

struct Call {
  int64_t begin, end;
};

nmt::ModelShape small_shape(bool pre_norm, bool shared) {
  nmt::ModelShape s;
  s.vocab = 29;
  s.d_model = 16;
  s.heads = 2;
  s.ffn_dim = 24;
  s.encoder_layers = 2;
  s.decoder_layers = 3;
  s.pre_norm = pre_norm;
  s.shared_embeddings = shared;
  return s;
}

}  // namespace

TEST_CASE("backward reports each parameter once, stage by stage in layout order", "[cpu][ddp]") {
  for (bool pre_norm : {false, true})
    for (bool shared : {false, true}) {
      INFO("pre_norm " << pre_norm << ", shared embeddings " << shared);
      nmt::Transformer model(small_shape(pre_norm, shared), nmt::Device::cpu, 64, 16);
      model.params().initialize(1);
      std::vector<Call> calls;
      model.set_grad_ready_hook([&](const nmt::Param& p) {
        calls.push_back({p.offset, p.offset + p.numel});
      });
      nmt::Batch batch = nmt::make_batch({{4, 5, 6}, {7, 8}}, {{9, 10}, {11, 12, 13}}, {0, 1}, 8);
      model.forward_backward(batch, nmt::StepContext{1, 1, true}, 0.1f);

      REQUIRE(calls.size() == model.params().params().size());
      std::vector<Call> sorted = calls;
      std::sort(sorted.begin(), sorted.end(), [](Call a, Call b) { return a.begin < b.begin; });
      for (size_t i = 0; i < sorted.size(); ++i)  // the calls tile the buffer: each exactly once
        CHECK(sorted[i].begin == (i == 0 ? 0 : sorted[i - 1].end));
      CHECK(sorted.back().end == model.params().total_elements());

      // A stage reports its parameters from the end of its layout span to its start: a run of
      // calls each ending where the previous began. Runs must then ascend through the layout.
      int64_t run_begin = calls[0].begin, previous_run_end = 0, run_end = calls[0].end;
      for (size_t i = 1; i <= calls.size(); ++i) {
        if (i < calls.size() && calls[i].end == calls[i - 1].begin) {
          run_begin = calls[i].begin;
          continue;
        }
        CHECK(run_begin >= previous_run_end);
        previous_run_end = run_end;
        if (i < calls.size()) run_begin = calls[i].begin, run_end = calls[i].end;
      }

      calls.clear();
      model.set_grad_ready_hook(nullptr);
      model.forward_backward(batch, nmt::StepContext{1, 2, true}, 0.1f);
      CHECK(calls.empty());
    }
}

TEST_CASE("with an ExchangeProgress, finished stages are held back until it grows, and final",
          "[cpu][ddp]") {
  nmt::Transformer model(small_shape(false, true), nmt::Device::cpu, 64, 16);
  model.params().initialize(1);
  const int64_t third = model.params().total_elements() / 3;
  std::vector<const nmt::Param*> reported;
  std::vector<std::vector<float>> at_report;
  std::vector<size_t> reported_before;  // how many were reported at each question
  auto grad_of = [](const nmt::Param& p) {
    const float* g = static_cast<const float*>(p.grad.data);
    return std::vector<float>(g, g + p.numel);
  };
  model.set_grad_ready_hook(
      [&](const nmt::Param& p) {
        reported.push_back(&p);
        at_report.push_back(grad_of(p));
      },
      [&](const std::vector<const nmt::Param*>& finished) {
        reported_before.push_back(reported.size());
        int64_t elements = 0;
        for (const nmt::Param* p : finished) elements += p->numel;
        return static_cast<int>(elements / third);  // thirds of the parameters finished
      });
  nmt::Batch batch = nmt::make_batch({{4, 5, 6}, {7, 8}}, {{9, 10}, {11, 12, 13}}, {0, 1}, 8);
  model.forward_backward(batch, nmt::StepContext{1, 1, true}, 0.1f);
  model.set_grad_ready_hook(nullptr);

  REQUIRE(reported.size() == model.params().params().size());
  // Some questions found nothing new reported since the one before: stages were held back.
  size_t repeats = 0;
  for (size_t i = 1; i < reported_before.size(); ++i)
    repeats += reported_before[i] == reported_before[i - 1] ? 1 : 0;
  CHECK(repeats > 0);
  CHECK(reported_before.back() > 0);  // and some were reported before the end
  for (size_t i = 0; i < reported.size(); ++i) {
    INFO(reported[i]->name);
    CHECK(at_report[i] == grad_of(*reported[i]));  // nothing added to it after its report
  }
  // The reports are the same parameters in the same order as without the progress.
  std::vector<const nmt::Param*> one_by_one;
  model.set_grad_ready_hook([&](const nmt::Param& p) { one_by_one.push_back(&p); });
  model.forward_backward(batch, nmt::StepContext{1, 2, true}, 0.1f);
  model.set_grad_ready_hook(nullptr);
  CHECK(one_by_one == reported);
}
