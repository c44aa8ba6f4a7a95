// The LayerNorm backward ops with their second passes deferred (kernels/cuda/reduce.h
// PartialSumDeferral) give the immediate ops' bits once flushed: each of the four ops, f32 and
// bf16, at widths of several register variants, every op of a dtype recorded into one deferral and
// flushed together (passes of different widths in one launch); the generic path (d = 2000) and a
// deferral without room run their passes at once.
#include <string>
#include <vector>

#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/stream.h"
#include "test/cuda/gpu_test_util.h"
#include "test/support/catch.h"

namespace nmt::test {
namespace {

constexpr float kEps = 1e-5f, kP = 0.1f;

// One op's inputs on the GPU (mean and rstd from the GPU forward) and its outputs.
struct OpRun {
  int64_t rows, d;
  GpuTensor x, gamma, beta, dy, residual, y, mean, rstd, dx, d_branch, d_gamma, d_beta, d_bias;
  OpRun(int64_t rows_, int64_t d_, DType dtype, uint64_t seed)
      : rows(rows_),
        d(d_),
        x(upload(random_floats(rows * d, seed, -2.0f, 3.0f), {rows, d}, dtype)),
        gamma(upload(random_floats(d, seed + 1, 0.5f, 1.5f), {d}, dtype)),
        beta(upload(random_floats(d, seed + 2), {d}, dtype)),
        dy(upload(random_floats(rows * d, seed + 3), {rows, d}, dtype)),
        residual(upload(random_floats(rows * d, seed + 4), {rows, d}, dtype)),
        y(gpu_poisoned({rows, d}, dtype)),
        mean(gpu_poisoned({rows}, DType::f32)),
        rstd(gpu_poisoned({rows}, DType::f32)),
        dx(gpu_poisoned({rows, d}, dtype)),
        d_branch(gpu_poisoned({rows, d}, dtype)),
        d_gamma(upload(random_floats(d, seed + 5), {d}, DType::f32)),
        d_beta(upload(random_floats(d, seed + 6), {d}, DType::f32)),
        d_bias(upload(random_floats(d, seed + 7), {d}, DType::f32)) {
    cuda::layernorm_forward(x.view, gamma.view, beta.view, y.view, mean.view, rstd.view, kEps);
  }
  // op 0: layernorm_backward; 1: _add; 2: _dropout_bias; 3: _add_dropout_bias.
  void run(int op) {
    const RngKey key{7, 11, static_cast<uint32_t>(op)};
    switch (op) {
      case 0:
        cuda::layernorm_backward(dy.view, x.view, gamma.view, mean.view, rstd.view, dx.view,
                                 d_gamma.view, d_beta.view);
        break;
      case 1:
        cuda::layernorm_backward_add(dy.view, x.view, gamma.view, mean.view, rstd.view,
                                     residual.view, dx.view, d_gamma.view, d_beta.view);
        break;
      case 2:
        cuda::layernorm_backward_dropout_bias(dy.view, x.view, gamma.view, mean.view, rstd.view,
                                              dx.view, d_gamma.view, d_beta.view, d_branch.view, kP,
                                              key, d_bias.view);
        break;
      default:
        cuda::layernorm_backward_add_dropout_bias(dy.view, x.view, gamma.view, mean.view, rstd.view,
                                                  residual.view, dx.view, d_gamma.view, d_beta.view,
                                                  d_branch.view, kP, key, d_bias.view);
    }
  }
  std::vector<std::vector<float>> outputs(int op) const {
    std::vector<std::vector<float>> out = {download(dx.view), download(d_gamma.view),
                                           download(d_beta.view)};
    if (op >= 2) {
      out.push_back(download(d_branch.view));
      out.push_back(download(d_bias.view));
    }
    return out;
  }
};

struct Shape {
  int64_t rows, d;
};
const Shape kShapes[] = {{8192, 512}, {300, 1024}, {77, 64}, {129, 200}, {50, 2000}};
constexpr int kRegisterShapes = 4;  // all but the last (the generic path)

}  // namespace

TEST_CASE("deferred LayerNorm second passes give the immediate ops' bits",
          "[cuda][layernorm][deferral]") {
  for (DType dtype : {DType::f32, DType::bf16}) {
    std::vector<OpRun> now, later;
    int64_t floats = 0;
    for (const Shape& s : kShapes)
      for (int op = 0; op < 4; ++op) {
        const uint64_t seed = static_cast<uint64_t>(s.rows * 31 + s.d * 7 + op);
        now.emplace_back(s.rows, s.d, dtype, seed);
        later.emplace_back(s.rows, s.d, dtype, seed);
        floats += cuda::layernorm_backward_partial_floats(s.rows, s.d, dtype);
      }
    CHECK(cuda::layernorm_backward_partial_floats(50, 2000, dtype) == 0);
    for (size_t i = 0; i < now.size(); ++i) now[i].run(static_cast<int>(i % 4));
    DeviceBuffer buffer(static_cast<size_t>(floats) * sizeof(float) + 64);
    cuda::PartialSumDeferral deferral(static_cast<float*>(buffer.data()), floats);
    {
      cuda::DeferPartialSums scope(&deferral);
      CHECK(cuda::active_partial_sum_deferral() == &deferral);
      for (size_t i = 0; i < later.size(); ++i) later[i].run(static_cast<int>(i % 4));
    }
    CHECK(cuda::active_partial_sum_deferral() == nullptr);
    CHECK(deferral.recorded() == 4 * kRegisterShapes);
    deferral.flush(cuda::current_stream());
    CHECK(deferral.last_flushed() == 4 * kRegisterShapes);
    CHECK(deferral.recorded() == 0);
    for (size_t i = 0; i < now.size(); ++i) {
      const int op = static_cast<int>(i % 4);
      INFO(dtype_name(dtype) << " rows " << now[i].rows << " d " << now[i].d << " op " << op);
      const auto a = now[i].outputs(op), b = later[i].outputs(op);
      for (size_t k = 0; k < a.size(); ++k)
        check_identical("output " + std::to_string(k), b[k], a[k]);
    }
    // No room: the pass runs at once, with the same bits.
    OpRun small(8192, 512, dtype, 99), reference(8192, 512, dtype, 99);
    reference.run(3);
    float one_float = 0;
    cuda::PartialSumDeferral full(&one_float, 1);
    {
      cuda::DeferPartialSums scope(&full);
      small.run(3);
    }
    CHECK(full.recorded() == 0);
    const auto a = reference.outputs(3), b = small.outputs(3);
    for (size_t k = 0; k < a.size(); ++k)
      check_identical("no room, output " + std::to_string(k), b[k], a[k]);
  }
}

TEST_CASE("a flush of more passes than one launch takes gives each pass its immediate bits",
          "[cuda][deferral]") {
  // 150 triples recorded by hand (more than two launches' worth), each of its own width and part
  // count, some with a null output, against accumulate_partial_sum_triple run at once.
  constexpr int kPasses = 150;
  std::vector<GpuTensor> partials, now, later;
  cuda::PartialSumDeferral deferral;
  for (int i = 0; i < kPasses; ++i) {
    const int64_t parts = 1 + i % 37, cols = 1 + (i * 13) % 70;
    partials.push_back(
        upload(random_floats(parts * 3 * cols, 500 + i), {parts * 3 * cols}, DType::f32));
    const std::vector<float> init = random_floats(3 * cols, 700 + i);
    now.push_back(upload(init, {3 * cols}, DType::f32));
    later.push_back(upload(init, {3 * cols}, DType::f32));
    float* n = static_cast<float*>(now.back().view.data);
    float* l = static_cast<float*>(later.back().view.data);
    const bool skip_second = i % 5 == 0;
    const auto* p = static_cast<const float*>(partials.back().view.data);
    cuda::accumulate_partial_sum_triple(p, parts, cols, n, skip_second ? nullptr : n + cols,
                                        n + 2 * cols, cuda::current_stream());
    deferral.record({p, parts, cols, 3, {l, skip_second ? nullptr : l + cols, l + 2 * cols}});
  }
  deferral.flush(cuda::current_stream());
  CHECK(deferral.last_flushed() == kPasses);
  for (int i = 0; i < kPasses; ++i) {
    INFO("pass " << i);
    check_identical("outputs", download(later[i].view), download(now[i].view));
  }
}

}  // namespace nmt::test
