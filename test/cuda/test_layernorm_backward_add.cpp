// CUDA layernorm_backward_add: equal bit for bit to the two CUDA ops it replaces
// (layernorm_backward then residual_add), dx apart from and over the residual, and close to the
// CPU reference, in f32 / bf16 / f16 at odd shapes on the register and generic paths; dx over dy
// is refused.
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/layernorm.h"
#include "test/cuda/gpu_test_util.h"
#include "test/support/catch.h"

namespace nmt::test {
namespace {

// One case's host data; stats (mean, rstd) are computed on the CPU from x as the dtype holds it,
// and used by every backward of the case, so that only the backward is compared.
struct Case {
  int64_t rows, d;
  std::vector<float> x, gamma, dy, residual, grad_init;  // [rows, d] x3 ([d] gamma), [d]
  std::vector<float> mean, rstd;                         // [rows] each
};

Case make_case(int64_t rows, int64_t d, DType dtype) {
  const uint64_t seed = static_cast<uint64_t>(rows * 7919 + d);
  Case c;
  c.rows = rows;
  c.d = d;
  c.x = rounded(random_floats(rows * d, seed, -2.0f, 3.0f), dtype);
  c.gamma = rounded(random_floats(d, seed + 1, 0.5f, 1.5f), dtype);
  c.dy = rounded(random_floats(rows * d, seed + 2), dtype);
  c.residual = rounded(random_floats(rows * d, seed + 3), dtype);
  c.grad_init = random_floats(d, seed + 4);
  c.mean.resize(rows);
  c.rstd.resize(rows);
  std::vector<float> y(rows * d), beta(d, 0.0f);
  Tensor y_view = cpu_view(y, {rows, d}), mean = cpu_view(c.mean, {rows}),
         rstd = cpu_view(c.rstd, {rows});
  layernorm_forward(cpu_view(c.x, {rows, d}), cpu_view(c.gamma, {d}), cpu_view(beta, {d}), y_view,
                    mean, rstd, 1e-5f);
  return c;
}

struct Grads {
  std::vector<float> dx, d_gamma, d_beta;
};

// The CPU layernorm_backward_add in f32 on the case's (already rounded) inputs.
Grads cpu_backward_add(Case c) {
  const int64_t rows = c.rows, d = c.d;
  Grads g{std::vector<float>(rows * d), c.grad_init, c.grad_init};
  Tensor dx = cpu_view(g.dx, {rows, d}), dg = cpu_view(g.d_gamma, {d}),
         db = cpu_view(g.d_beta, {d});
  layernorm_backward_add(cpu_view(c.dy, {rows, d}), cpu_view(c.x, {rows, d}),
                         cpu_view(c.gamma, {d}), cpu_view(c.mean, {rows}), cpu_view(c.rstd, {rows}),
                         cpu_view(c.residual, {rows, d}), dx, dg, db);
  return g;
}

// The case on the GPU; [rows, d] tensors shifted `offset` elements (1: off 16-byte alignment,
// the generic path).
struct GpuCase {
  GpuTensor x, gamma, dy, residual, mean, rstd;
  GpuCase(const Case& c, DType dtype, int offset)
      : x(upload(c.x, {c.rows, c.d}, dtype, offset)),
        gamma(upload(c.gamma, {c.d}, dtype)),
        dy(upload(c.dy, {c.rows, c.d}, dtype, offset)),
        residual(upload(c.residual, {c.rows, c.d}, dtype, offset)),
        mean(upload(c.mean, {c.rows}, DType::f32)),
        rstd(upload(c.rstd, {c.rows}, DType::f32)) {}
};

Grads download_grads(const Tensor& dx, const Tensor& d_gamma, const Tensor& d_beta) {
  return {download(dx), download(d_gamma), download(d_beta)};
}

void check_identical_grads(const std::string& what, const Grads& a, const Grads& b) {
  check_identical(what + " dx", a.dx, b.dx);
  check_identical(what + " d_gamma", a.d_gamma, b.d_gamma);
  check_identical(what + " d_beta", a.d_beta, b.d_beta);
}

}  // namespace

TEST_CASE("cuda layernorm_backward_add equals layernorm_backward then residual_add",
          "[cuda][layernorm]") {
  // d 5 and 64: one lane a column / a pack; 520: four or eight packs a lane; 1500: generic.
  // 2500 rows: more rows than the register path's warps, which then stride over them.
  const int64_t widths[] = {5, 64, 520, 1500};
  const int64_t row_counts[] = {1, 3, 37, 2500};
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
    for (int64_t d : widths)
      for (int64_t rows : row_counts)
        for (int offset : {0, 1}) {
          if (rows * d > 1500000) continue;
          INFO("dtype " << dtype_name(dtype) << " rows " << rows << " d " << d << " offset "
                        << offset);
          const Case c = make_case(rows, d, dtype);
          GpuCase g(c, dtype, offset);
          const std::vector<int64_t> shape{rows, d};

          // The two ops it replaces.
          GpuTensor scratch = gpu_poisoned(shape, dtype, offset);
          GpuTensor two_dx = gpu_poisoned(shape, dtype, offset);
          GpuTensor two_dg = upload(c.grad_init, {d}, DType::f32),
                    two_db = upload(c.grad_init, {d}, DType::f32);
          cuda::layernorm_backward(g.dy.view, g.x.view, g.gamma.view, g.mean.view, g.rstd.view,
                                   scratch.view, two_dg.view, two_db.view);
          cuda::residual_add(g.residual.view, scratch.view, two_dx.view);
          const Grads two_ops = download_grads(two_dx.view, two_dg.view, two_db.view);

          GpuTensor dx = gpu_poisoned(shape, dtype, offset);
          GpuTensor dg = upload(c.grad_init, {d}, DType::f32),
                    db = upload(c.grad_init, {d}, DType::f32);
          cuda::layernorm_backward_add(g.dy.view, g.x.view, g.gamma.view, g.mean.view, g.rstd.view,
                                       g.residual.view, dx.view, dg.view, db.view);
          const Grads fused = download_grads(dx.view, dg.view, db.view);
          check_identical_grads("fused", fused, two_ops);

          // dx over the residual.
          GpuTensor dg2 = upload(c.grad_init, {d}, DType::f32),
                    db2 = upload(c.grad_init, {d}, DType::f32);
          cuda::layernorm_backward_add(g.dy.view, g.x.view, g.gamma.view, g.mean.view, g.rstd.view,
                                       g.residual.view, g.residual.view, dg2.view, db2.view);
          check_identical_grads("fused over residual",
                                download_grads(g.residual.view, dg2.view, db2.view), two_ops);

          // Against the CPU reference: f32 on the unrounded inputs (ref) and on these (baseline).
          const Grads ref = cpu_backward_add(make_case(rows, d, DType::f32));
          const Grads base = cpu_backward_add(c);
          check_close("dx", dtype, fused.dx, ref.dx, rounded(base.dx, dtype));
          check_close("d_gamma", dtype, fused.d_gamma, ref.d_gamma, base.d_gamma);
          check_close("d_beta", dtype, fused.d_beta, ref.d_beta, base.d_beta);
        }
}

TEST_CASE("cuda layernorm_backward_add refuses dx over dy", "[cuda][layernorm][errors]") {
  const int64_t rows = 3, d = 64;
  const Case c = make_case(rows, d, DType::f32);
  GpuCase g(c, DType::f32, 0);
  GpuTensor dg = upload(c.grad_init, {d}, DType::f32), db = upload(c.grad_init, {d}, DType::f32);
  CHECK_THROWS_AS(
      cuda::layernorm_backward_add(g.dy.view, g.x.view, g.gamma.view, g.mean.view, g.rstd.view,
                                   g.residual.view, g.dy.view, dg.view, db.view),
      std::invalid_argument);
}

}  // namespace nmt::test
