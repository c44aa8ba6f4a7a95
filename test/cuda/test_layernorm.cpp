// CUDA LayerNorm against the CPU reference at odd widths (register and generic paths), f32 / bf16 /
// f16, with deterministic and accumulating parameter gradients.
#include <vector>

#include "kernels/cuda/layernorm.h"
#include "kernels/layernorm.h"
#include "test/cuda/gpu_test_util.h"
#include "test/support/catch.h"

namespace nmt::test {
namespace {

struct CpuLayerNorm {
  std::vector<float> y, mean, rstd, dx, d_gamma, d_beta;
};

// The CPU reference on the given (already rounded or not) inputs; d_gamma / d_beta start from
// `grad_init` (accumulation).
CpuLayerNorm cpu_layernorm(std::vector<float> x, std::vector<float> gamma, std::vector<float> beta,
                           std::vector<float> dy, const std::vector<float>& grad_init, int64_t rows,
                           int64_t d) {
  CpuLayerNorm r;
  r.y.resize(rows * d);
  r.mean.resize(rows);
  r.rstd.resize(rows);
  r.dx.resize(rows * d);
  r.d_gamma = grad_init;
  r.d_beta = grad_init;
  Tensor y = cpu_view(r.y, {rows, d}), mean = cpu_view(r.mean, {rows}),
         rstd = cpu_view(r.rstd, {rows});
  layernorm_forward(cpu_view(x, {rows, d}), cpu_view(gamma, {d}), cpu_view(beta, {d}), y, mean,
                    rstd, 1e-5f);
  Tensor dx = cpu_view(r.dx, {rows, d}), dg = cpu_view(r.d_gamma, {d}),
         db = cpu_view(r.d_beta, {d});
  layernorm_backward(cpu_view(dy, {rows, d}), cpu_view(x, {rows, d}), cpu_view(gamma, {d}),
                     cpu_view(r.mean, {rows}), cpu_view(r.rstd, {rows}), dx, dg, db);
  return r;
}

// The forward and backward of `rows` x d against the CPU reference, deterministic and in place.
void check_layernorm(DType dtype, int64_t rows, int64_t d) {
  INFO("dtype " << dtype_name(dtype) << " rows " << rows << " d " << d);
  const uint64_t seed = static_cast<uint64_t>(rows * 7919 + d);
  // A row mean well away from 0 tests the two-pass variance.
  std::vector<float> x = random_floats(rows * d, seed, 2.0f, 4.0f);
  std::vector<float> gamma = random_floats(d, seed + 1, 0.5f, 1.5f);
  std::vector<float> beta = random_floats(d, seed + 2, -0.5f, 0.5f);
  std::vector<float> dy = random_floats(rows * d, seed + 3);
  std::vector<float> grad_init = random_floats(d, seed + 4);
  const CpuLayerNorm ref = cpu_layernorm(x, gamma, beta, dy, grad_init, rows, d);
  const CpuLayerNorm base =
      cpu_layernorm(rounded(x, dtype), rounded(gamma, dtype), rounded(beta, dtype),
                    rounded(dy, dtype), grad_init, rows, d);

  GpuTensor gx = upload(x, {rows, d}, dtype), gg = upload(gamma, {d}, dtype),
            gb = upload(beta, {d}, dtype), gdy = upload(dy, {rows, d}, dtype);
  GpuTensor gy = gpu_poisoned({rows, d}, dtype), gmean = gpu_poisoned({rows}, DType::f32),
            grstd = gpu_poisoned({rows}, DType::f32);
  cuda::layernorm_forward(gx.view, gg.view, gb.view, gy.view, gmean.view, grstd.view, 1e-5f);
  check_close("y", dtype, download(gy.view), ref.y, rounded(base.y, dtype));
  check_close("mean", dtype, download(gmean.view), ref.mean, base.mean);
  check_close("rstd", dtype, download(grstd.view), ref.rstd, base.rstd);

  GpuTensor gdx = gpu_poisoned({rows, d}, dtype);
  GpuTensor gdg = upload(grad_init, {d}, DType::f32), gdb = upload(grad_init, {d}, DType::f32);
  cuda::layernorm_backward(gdy.view, gx.view, gg.view, gmean.view, grstd.view, gdx.view, gdg.view,
                           gdb.view);
  const std::vector<float> dx = download(gdx.view), dg = download(gdg.view),
                           db = download(gdb.view);
  check_close("dx", dtype, dx, ref.dx, rounded(base.dx, dtype));
  check_close("d_gamma", dtype, dg, ref.d_gamma, base.d_gamma);
  check_close("d_beta", dtype, db, ref.d_beta, base.d_beta);

  // Deterministic: the same inputs give the same bits; in place (dx aliases dy) agrees.
  GpuTensor gdg2 = upload(grad_init, {d}, DType::f32), gdb2 = upload(grad_init, {d}, DType::f32);
  cuda::layernorm_backward(gdy.view, gx.view, gg.view, gmean.view, grstd.view, gdy.view, gdg2.view,
                           gdb2.view);
  check_identical("dx in place", download(gdy.view), dx);
  check_identical("d_gamma rerun", download(gdg2.view), dg);
  check_identical("d_beta rerun", download(gdb2.view), db);
}

}  // namespace

TEST_CASE("cuda layernorm matches the CPU reference", "[cuda][layernorm]") {
  const int64_t widths[] = {1, 7, 33, 100, 512, 513, 1024, 1500};
  const int64_t row_counts[] = {1, 7, 100, 513};
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
    for (int64_t d : widths)
      for (int64_t rows : row_counts)
        if (rows * d <= 300000 || rows == 513) check_layernorm(dtype, rows, d);
}

// The backward's warps stride over the rows of a grid that fills the GPU once (two to four blocks
// of 8 warps an SM), so the cases above (at most 513 rows) give a warp one row. 6403 rows give
// every warp at least two and some a third (up to 200 multiprocessors), so each warp's sums over
// its rows and the last, partial stride are checked against the reference: f32 d = 512 and bf16 /
// f16 d = 1024 (two blocks an SM), bf16 d = 512 (four).
TEST_CASE("cuda layernorm backward over several rows a warp", "[cuda][layernorm]") {
  check_layernorm(DType::f32, 6403, 512);
  check_layernorm(DType::bf16, 6403, 1024);
  check_layernorm(DType::f16, 6403, 1024);
  check_layernorm(DType::bf16, 6403, 512);  // 32 bytes a lane: one row at a time
}

TEST_CASE("cuda layernorm takes the generic path off 16-byte alignment", "[cuda][layernorm]") {
  const int64_t rows = 9, d = 64;
  std::vector<float> x = random_floats(rows * d, 3, -2.0f, 2.0f);
  std::vector<float> gamma = random_floats(d, 4, 0.5f, 1.5f), beta = random_floats(d, 5);
  std::vector<float> dy = random_floats(rows * d, 6), zeros(d, 0.0f);
  const CpuLayerNorm ref = cpu_layernorm(x, gamma, beta, dy, zeros, rows, d);
  GpuTensor gx = upload(x, {rows, d}, DType::f32, 1), gg = upload(gamma, {d}, DType::f32, 1),
            gb = upload(beta, {d}, DType::f32, 1), gdy = upload(dy, {rows, d}, DType::f32, 1);
  GpuTensor gy = gpu_poisoned({rows, d}, DType::f32, 1), gmean = gpu_poisoned({rows}, DType::f32),
            grstd = gpu_poisoned({rows}, DType::f32), gdx = gpu_poisoned({rows, d}, DType::f32, 1);
  GpuTensor gdg = upload(zeros, {d}, DType::f32), gdb = upload(zeros, {d}, DType::f32);
  cuda::layernorm_forward(gx.view, gg.view, gb.view, gy.view, gmean.view, grstd.view, 1e-5f);
  cuda::layernorm_backward(gdy.view, gx.view, gg.view, gmean.view, grstd.view, gdx.view, gdg.view,
                           gdb.view);
  check_close("y", DType::f32, download(gy.view), ref.y, ref.y);
  check_close("dx", DType::f32, download(gdx.view), ref.dx, ref.dx);
  check_close("d_gamma", DType::f32, download(gdg.view), ref.d_gamma, ref.d_gamma);
  check_close("d_beta", DType::f32, download(gdb.view), ref.d_beta, ref.d_beta);
}

}  // namespace nmt::test
