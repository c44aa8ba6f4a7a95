// The post-norm sublayer's fused LayerNorm tails on the GPU, against the two CUDA ops each
// replaces, run on the same inputs in the same call:
// - dropout_residual_layernorm_forward: sum, y, mean and rstd bit for bit those of
//   dropout_residual_add then layernorm_forward, sum over a fresh buffer, over the residual and
//   over the branch; the sum also equals a host emulation of the two ops' rounding, and y, mean
//   and rstd are close to the CPU LayerNorm of the stored sum.
// - layernorm_backward_dropout_bias: dx, d_gamma, d_beta and d_branch bit for bit those of
//   layernorm_backward then dropout_backward_bias, dx over dy too; d_branch_bias (summed in the
//   LayerNorm gradients' order on the register path) the same bits on every call, and as close to
//   a double-precision sum of the stored d_branch as the pair's (at most 2x its error in L2, 3x its
//   largest, plus one f32 ulp of the column's absolute sum); where the op runs the pair (the
//   generic widths, an unaligned d_branch), the pair's bits.
// - layernorm_backward_add_dropout_bias (pre-norm): the same against layernorm_backward_add then
//   dropout_backward_bias, dx over the residual (as the model calls it) too; the pair's bits where
//   it runs the pair (the generic widths, f32 rows of up to 256 columns off the packs).
// f32 / bf16 / f16; rows 1, 7, 333, 8192; widths 8 to 1040 (register path with one to eight packs
// a lane, one element a lane, and the generic path: 1040 in every dtype, and every width over 256
// off 16-byte alignment); p 0, 0.1 and 0.3. Outputs start as NaN (gpu_poisoned), so an element
// left unwritten fails.
#include <cfloat>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda/bias_grad_tails.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/elementwise.h"
#include "kernels/layernorm.h"
#include "test/cuda/gpu_test_util.h"
#include "test/kernels/kernel_test_util.h"
#include "test/support/catch.h"

namespace nmt::test {
namespace {

constexpr float kEps = 1e-5f;
const int64_t kRowCounts[] = {1, 7, 333, 8192};
const int64_t kWidths[] = {8, 64, 96, 512, 520, 1024, 1040};
const float kDropouts[] = {0.0f, 0.1f, 0.3f};
const DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};

// The LayerNorm path of a width (layernorm_rows.cuh, with_row_variant): the register path for
// 16-byte packs (8 bf16 / f16 or 4 f32 elements) up to 1024 columns when aligned, or one element
// a lane up to 256 columns; else the generic path, where the fused backward runs the two ops.
bool register_path(DType dtype, int64_t d, bool aligned) {
  const int64_t vec = dtype == DType::f32 ? 4 : 8;
  return (aligned && d % vec == 0 && d / vec <= 1024 / vec) || d <= 256;
}

std::string path_name(DType dtype, int64_t d, bool aligned) {
  if (!register_path(dtype, d, aligned)) return "generic path";
  const int64_t vec = dtype == DType::f32 ? 4 : 8;
  return aligned && d % vec == 0 ? "register path, packs" : "register path, one element a lane";
}

// --- forward ---------------------------------------------------------------------------------

struct ForwardHost {
  std::vector<float> sum, y, mean, rstd;
};

ForwardHost download_forward(const Tensor& sum, const ForwardOutputs& out) {
  return {download(sum), download(out.y.view), download(out.mean.view), download(out.rstd.view)};
}

void check_identical_forward(const std::string& what, const ForwardHost& got,
                             const ForwardHost& expected) {
  check_identical(what + ": sum", got.sum, expected.sum);
  check_identical(what + ": y", got.y, expected.y);
  check_identical(what + ": mean", got.mean, expected.mean);
  check_identical(what + ": rstd", got.rstd, expected.rstd);
}

// The two ops' sum on the host: the dropped-out branch rounded to the dtype where dropout stores
// it, then the add in f32 rounded to the dtype (residual and branch already hold dtype values).
std::vector<float> host_sum(const std::vector<float>& residual, const std::vector<float>& branch,
                            int64_t rows, int64_t d, float p, const RngKey& key, DType dtype) {
  std::vector<float> dropped = branch, sum(branch.size());
  Tensor dropped_view = cpu_view(dropped, {rows, d});
  dropout_forward(dropped_view, dropped_view, p, key);
  for (size_t i = 0; i < sum.size(); ++i)
    sum[i] = round_to(residual[i] + round_to(dropped[i], dtype), dtype);
  return sum;
}

void check_forward(DType dtype, int64_t rows, int64_t d, int offset) {
  const uint64_t seed = static_cast<uint64_t>(rows * 1009 + d * 7 + offset);
  const auto n = static_cast<size_t>(rows * d);
  const std::vector<int64_t> shape{rows, d};
  // A residual away from 0 gives rows a large mean (the two-pass variance).
  const std::vector<float> residual = rounded(random_floats(n, seed, 1.0f, 3.0f), dtype),
                           branch = rounded(nonzero_values(n, seed + 2), dtype),
                           gamma = rounded(random_floats(d, seed + 4, 0.5f, 1.5f), dtype),
                           beta = rounded(random_floats(d, seed + 5, -0.5f, 0.5f), dtype);
  const GpuTensor gresidual = upload(residual, shape, dtype, offset),
                  gbranch = upload(branch, shape, dtype, offset),
                  ggamma = upload(gamma, {d}, dtype), gbeta = upload(beta, {d}, dtype);
  for (float p : kDropouts) {
    INFO("dtype " << dtype_name(dtype) << " rows " << rows << " d " << d << " offset " << offset
                  << " (" << path_name(dtype, d, offset == 0) << ") p " << p);
    const RngKey key{20250101, 17, static_cast<uint32_t>(d)};

    // The two ops it replaces.
    ForwardOutputs two(rows, d, dtype, offset);
    cuda::dropout_residual_add(gresidual.view, gbranch.view, two.sum.view, p, key);
    cuda::layernorm_forward(two.sum.view, ggamma.view, gbeta.view, two.y.view, two.mean.view,
                            two.rstd.view, kEps);
    const ForwardHost expected = download_forward(two.sum.view, two);

    ForwardOutputs fused(rows, d, dtype, offset);
    dropout_residual_layernorm_forward(gresidual.view, gbranch.view, fused.sum.view, p, key,
                                       ggamma.view, gbeta.view, fused.y.view, fused.mean.view,
                                       fused.rstd.view, kEps);
    const ForwardHost got = download_forward(fused.sum.view, fused);
    check_identical_forward("fused against dropout_residual_add + layernorm_forward", got,
                            expected);

    // sum over the residual, then over the branch (as the sublayer could run it).
    GpuTensor over_residual = upload(residual, shape, dtype, offset);
    ForwardOutputs out1(rows, d, dtype, offset);
    dropout_residual_layernorm_forward(over_residual.view, gbranch.view, over_residual.view, p, key,
                                       ggamma.view, gbeta.view, out1.y.view, out1.mean.view,
                                       out1.rstd.view, kEps);
    check_identical_forward("sum over the residual", download_forward(over_residual.view, out1),
                            expected);
    GpuTensor over_branch = upload(branch, shape, dtype, offset);
    ForwardOutputs out2(rows, d, dtype, offset);
    dropout_residual_layernorm_forward(gresidual.view, over_branch.view, over_branch.view, p, key,
                                       ggamma.view, gbeta.view, out2.y.view, out2.mean.view,
                                       out2.rstd.view, kEps);
    check_identical_forward("sum over the branch", download_forward(over_branch.view, out2),
                            expected);

    // The sum is the two ops' rounding of the CPU's mask (the same Philox draws).
    check_identical("sum against the host's dropout and rounding", got.sum,
                    host_sum(residual, branch, rows, d, p, key, dtype));
    // y, mean, rstd against the CPU LayerNorm of the stored sum (the pair's own accuracy is
    // test_layernorm.cpp's; this says which output drifted if the pair and the op moved together).
    if (rows <= 333) {
      std::vector<float> sum = got.sum, y(n), mean(rows), rstd(rows);
      Tensor y_view = cpu_view(y, shape), mean_view = cpu_view(mean, {rows}),
             rstd_view = cpu_view(rstd, {rows});
      std::vector<float> g = gamma, b = beta;
      layernorm_forward(cpu_view(sum, shape), cpu_view(g, {d}), cpu_view(b, {d}), y_view, mean_view,
                        rstd_view, kEps);
      check_close("y against the CPU", dtype, got.y, y, rounded(y, dtype));
      check_close("mean against the CPU", DType::f32, got.mean, mean, mean);
      check_close("rstd against the CPU", DType::f32, got.rstd, rstd, rstd, 2.0, 1e-4);
    }
  }
}

// --- backward --------------------------------------------------------------------------------

struct BackwardOutputs {
  GpuTensor dx, d_gamma, d_beta, d_branch, d_branch_bias;
  BackwardOutputs(int64_t rows, int64_t d, DType dtype, int offset,
                  const std::vector<float>& grad_init)
      : dx(gpu_poisoned({rows, d}, dtype, offset)),
        d_gamma(upload(grad_init, {d}, DType::f32)),
        d_beta(upload(grad_init, {d}, DType::f32)),
        d_branch(gpu_poisoned({rows, d}, dtype, offset)),
        d_branch_bias(upload(grad_init, {d}, DType::f32)) {}
};

struct BackwardHost {
  std::vector<float> dx, d_gamma, d_beta, d_branch, d_branch_bias;
};

BackwardHost download_backward(const Tensor& dx, const BackwardOutputs& out) {
  return {download(dx), download(out.d_gamma.view), download(out.d_beta.view),
          download(out.d_branch.view), download(out.d_branch_bias.view)};
}

// Everything but d_branch_bias, which check_branch_bias judges.
void check_identical_backward(const std::string& what, const BackwardHost& got,
                              const BackwardHost& expected) {
  check_identical(what + ": dx", got.dx, expected.dx);
  check_identical(what + ": d_gamma", got.d_gamma, expected.d_gamma);
  check_identical(what + ": d_beta", got.d_beta, expected.d_beta);
  check_identical(what + ": d_branch", got.d_branch, expected.d_branch);
}

// d_branch_bias = init + the column sums of the stored d_branch, in f32 in two orders: the fused
// op's and the pair's (column_sums.cuh). Both are judged against a double sum of the same values:
// the fused error at most 2x the pair's in L2 and 3x the pair's largest per column, plus one f32
// ulp of the column's absolute sum (the scale below which no f32 sum is exact).
void check_branch_bias(const std::vector<float>& fused, const std::vector<float>& pair,
                       const std::vector<float>& d_branch, const std::vector<float>& init,
                       int64_t rows, int64_t d) {
  std::vector<double> exact(init.begin(), init.end()), magnitude(d);
  for (int64_t c = 0; c < d; ++c) magnitude[c] = std::fabs(init[c]);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < d; ++c) {
      exact[c] += d_branch[r * d + c];
      magnitude[c] += std::fabs(d_branch[r * d + c]);
    }
  double fused_l2 = 0, pair_l2 = 0, floor_l2 = 0, pair_max = 0, worst_excess = 0;
  int64_t worst = 0;
  bool finite = true;
  for (int64_t c = 0; c < d; ++c) {
    const double fused_error = std::fabs(fused[c] - exact[c]);
    const double pair_error = std::fabs(pair[c] - exact[c]);
    const double floor = FLT_EPSILON * magnitude[c];
    finite = finite && std::isfinite(fused_error);
    fused_l2 += fused_error * fused_error;
    pair_l2 += pair_error * pair_error;
    floor_l2 += floor * floor;
    pair_max = std::max(pair_max, pair_error);
    if (fused_error - floor > worst_excess) {
      worst_excess = fused_error - floor;
      worst = c;
    }
  }
  fused_l2 = std::sqrt(fused_l2);
  pair_l2 = std::sqrt(pair_l2);
  floor_l2 = std::sqrt(floor_l2);
  INFO("d_branch_bias against a double sum of the stored d_branch: fused error L2 "
       << fused_l2 << ", pair error L2 " << pair_l2 << ", floor L2 " << floor_l2
       << "; largest fused error beyond its column's floor " << worst_excess << " (column " << worst
       << ", fused " << fused[worst] << ", pair " << pair[worst] << ", exact " << exact[worst]
       << "), pair's largest error " << pair_max);
  CHECK(finite);
  CHECK(fused_l2 <= 2.0 * pair_l2 + floor_l2);
  CHECK(worst_excess <= 3.0 * pair_max);
}

void check_backward(DType dtype, int64_t rows, int64_t d, int offset) {
  const uint64_t seed = static_cast<uint64_t>(rows * 2003 + d * 11 + offset);
  const auto n = static_cast<size_t>(rows * d);
  const std::vector<int64_t> shape{rows, d};
  const bool register_kernel = register_path(dtype, d, offset == 0);
  const std::vector<float> x = rounded(random_floats(n, seed, -2.0f, 3.0f), dtype),
                           gamma = rounded(random_floats(d, seed + 1, 0.5f, 1.5f), dtype),
                           dy = rounded(random_floats(n, seed + 2), dtype),
                           grad_init = random_floats(d, seed + 3);
  // The saved statistics, from the CPU on x as the dtype holds it.
  std::vector<float> mean(rows), rstd(rows);
  {
    std::vector<float> y(n), beta(d, 0.0f), x_copy = x, gamma_copy = gamma;
    Tensor y_view = cpu_view(y, shape), mean_view = cpu_view(mean, {rows}),
           rstd_view = cpu_view(rstd, {rows});
    layernorm_forward(cpu_view(x_copy, shape), cpu_view(gamma_copy, {d}), cpu_view(beta, {d}),
                      y_view, mean_view, rstd_view, kEps);
  }
  const GpuTensor gx = upload(x, shape, dtype, offset), ggamma = upload(gamma, {d}, dtype),
                  gdy = upload(dy, shape, dtype, offset), gmean = upload(mean, {rows}, DType::f32),
                  grstd = upload(rstd, {rows}, DType::f32);
  for (float p : kDropouts) {
    INFO("dtype " << dtype_name(dtype) << " rows " << rows << " d " << d << " offset " << offset
                  << " (" << path_name(dtype, d, offset == 0) << ") p " << p);
    const RngKey key{20250102, 23, static_cast<uint32_t>(d)};
    const auto fused_call = [&](const Tensor& dy_view, BackwardOutputs& out, Tensor& dx_view) {
      layernorm_backward_dropout_bias(dy_view, gx.view, ggamma.view, gmean.view, grstd.view,
                                      dx_view, out.d_gamma.view, out.d_beta.view, out.d_branch.view,
                                      p, key, out.d_branch_bias.view);
    };

    // The two ops it replaces.
    BackwardOutputs two(rows, d, dtype, offset, grad_init);
    cuda::layernorm_backward(gdy.view, gx.view, ggamma.view, gmean.view, grstd.view, two.dx.view,
                             two.d_gamma.view, two.d_beta.view);
    cuda::dropout_backward_bias(two.dx.view, two.d_branch.view, p, key, two.d_branch_bias.view);
    const BackwardHost expected = download_backward(two.dx.view, two);

    BackwardOutputs fused(rows, d, dtype, offset, grad_init);
    fused_call(gdy.view, fused, fused.dx.view);
    const BackwardHost got = download_backward(fused.dx.view, fused);
    check_identical_backward("fused against layernorm_backward + dropout_backward_bias", got,
                             expected);
    check_branch_bias(got.d_branch_bias, expected.d_branch_bias, got.d_branch, grad_init, rows, d);
    if (!register_kernel)
      check_identical("d_branch_bias on the generic path (the pair's)", got.d_branch_bias,
                      expected.d_branch_bias);

    // A second call gives the same bits, d_branch_bias included.
    BackwardOutputs again(rows, d, dtype, offset, grad_init);
    fused_call(gdy.view, again, again.dx.view);
    const BackwardHost got_again = download_backward(again.dx.view, again);
    check_identical_backward("second call", got_again, got);
    check_identical("second call: d_branch_bias", got_again.d_branch_bias, got.d_branch_bias);

    // dx over dy, as the sublayer runs it (the LayerNorm's input gradient into d_x in place).
    GpuTensor in_place = upload(dy, shape, dtype, offset);
    BackwardOutputs over(rows, d, dtype, offset, grad_init);
    fused_call(in_place.view, over, in_place.view);
    const BackwardHost got_over = download_backward(in_place.view, over);
    check_identical_backward("dx over dy", got_over, expected);
    check_identical("dx over dy: d_branch_bias", got_over.d_branch_bias, got.d_branch_bias);
  }
}

// layernorm_backward_add_dropout_bias against layernorm_backward_add then dropout_backward_bias,
// dx into fresh memory and over the residual (in place).
void check_backward_add(DType dtype, int64_t rows, int64_t d, int offset) {
  const uint64_t seed = static_cast<uint64_t>(rows * 3001 + d * 13 + offset);
  const auto n = static_cast<size_t>(rows * d);
  const std::vector<int64_t> shape{rows, d};
  // The f32 one-element variant of 65 to 256 columns runs the pair (add_dropout_bias_fused).
  const bool fused_kernel = register_path(dtype, d, offset == 0) &&
                            !(dtype == DType::f32 && d > 64 && (offset != 0 || d % 4 != 0));
  const std::vector<float> x = rounded(random_floats(n, seed, -2.0f, 3.0f), dtype),
                           gamma = rounded(random_floats(d, seed + 1, 0.5f, 1.5f), dtype),
                           dy = rounded(random_floats(n, seed + 2), dtype),
                           residual = rounded(random_floats(n, seed + 3), dtype),
                           grad_init = random_floats(d, seed + 4);
  std::vector<float> mean(rows), rstd(rows);
  {
    std::vector<float> y(n), beta(d, 0.0f), x_copy = x, gamma_copy = gamma;
    Tensor y_view = cpu_view(y, shape), mean_view = cpu_view(mean, {rows}),
           rstd_view = cpu_view(rstd, {rows});
    layernorm_forward(cpu_view(x_copy, shape), cpu_view(gamma_copy, {d}), cpu_view(beta, {d}),
                      y_view, mean_view, rstd_view, kEps);
  }
  const GpuTensor gx = upload(x, shape, dtype, offset), ggamma = upload(gamma, {d}, dtype),
                  gdy = upload(dy, shape, dtype, offset),
                  gresidual = upload(residual, shape, dtype, offset),
                  gmean = upload(mean, {rows}, DType::f32),
                  grstd = upload(rstd, {rows}, DType::f32);
  for (float p : kDropouts) {
    INFO("dtype " << dtype_name(dtype) << " rows " << rows << " d " << d << " offset " << offset
                  << " (" << path_name(dtype, d, offset == 0) << ") p " << p);
    const RngKey key{20250105, 29, static_cast<uint32_t>(d)};
    const auto fused_call = [&](const Tensor& residual_view, BackwardOutputs& out,
                                Tensor& dx_view) {
      layernorm_backward_add_dropout_bias(gdy.view, gx.view, ggamma.view, gmean.view, grstd.view,
                                          residual_view, dx_view, out.d_gamma.view, out.d_beta.view,
                                          out.d_branch.view, p, key, out.d_branch_bias.view);
    };

    // The two ops it replaces.
    BackwardOutputs two(rows, d, dtype, offset, grad_init);
    cuda::layernorm_backward_add(gdy.view, gx.view, ggamma.view, gmean.view, grstd.view,
                                 gresidual.view, two.dx.view, two.d_gamma.view, two.d_beta.view);
    cuda::dropout_backward_bias(two.dx.view, two.d_branch.view, p, key, two.d_branch_bias.view);
    const BackwardHost expected = download_backward(two.dx.view, two);
    if (p == 0.0f)
      check_identical("the pair's d_branch at p 0: dx", expected.d_branch, expected.dx);

    BackwardOutputs fused(rows, d, dtype, offset, grad_init);
    fused_call(gresidual.view, fused, fused.dx.view);
    const BackwardHost got = download_backward(fused.dx.view, fused);
    check_identical_backward("fused against layernorm_backward_add + dropout_backward_bias", got,
                             expected);
    check_branch_bias(got.d_branch_bias, expected.d_branch_bias, got.d_branch, grad_init, rows, d);
    if (!fused_kernel)
      check_identical("d_branch_bias where the op runs the pair", got.d_branch_bias,
                      expected.d_branch_bias);

    // A second call gives the same bits, d_branch_bias included.
    BackwardOutputs again(rows, d, dtype, offset, grad_init);
    fused_call(gresidual.view, again, again.dx.view);
    const BackwardHost got_again = download_backward(again.dx.view, again);
    check_identical_backward("second call", got_again, got);
    check_identical("second call: d_branch_bias", got_again.d_branch_bias, got.d_branch_bias);

    // dx over the residual, as the pre-norm sublayer runs it.
    GpuTensor in_place = upload(residual, shape, dtype, offset);
    BackwardOutputs over(rows, d, dtype, offset, grad_init);
    fused_call(in_place.view, over, in_place.view);
    const BackwardHost got_over = download_backward(in_place.view, over);
    check_identical_backward("dx over the residual", got_over, expected);
    check_identical("dx over the residual: d_branch_bias", got_over.d_branch_bias,
                    got.d_branch_bias);
  }
}

}  // namespace

TEST_CASE("cuda dropout_residual_layernorm_forward equals dropout_residual_add + layernorm_forward",
          "[cuda][layernorm][dropout]") {
  for (DType dtype : kDtypes)
    for (int64_t d : kWidths)
      for (int64_t rows : kRowCounts)
        for (int offset : {0, 1}) check_forward(dtype, rows, d, offset);
}

TEST_CASE("cuda dropout_residual_layernorm_forward runs the two ops for an unaligned input",
          "[cuda][layernorm][dropout]") {
  // sum, gamma, beta, y aligned (layernorm_forward's packs), the residual one element off: the op
  // cannot read the residual in packs and runs dropout_residual_add then layernorm_forward.
  for (DType dtype : kDtypes) {
    const int64_t rows = 33, d = 512;
    INFO("dtype " << dtype_name(dtype));
    const std::vector<int64_t> shape{rows, d};
    const RngKey key{20250103, 3, 1};
    const std::vector<float> residual = rounded(random_floats(rows * d, 1, 1.0f, 3.0f), dtype),
                             branch = rounded(nonzero_values(rows * d, 2), dtype),
                             gamma = rounded(random_floats(d, 3, 0.5f, 1.5f), dtype),
                             beta = rounded(random_floats(d, 4), dtype);
    const GpuTensor gresidual = upload(residual, shape, dtype, 1),
                    gbranch = upload(branch, shape, dtype), ggamma = upload(gamma, {d}, dtype),
                    gbeta = upload(beta, {d}, dtype);
    ForwardOutputs two(rows, d, dtype, 0), fused(rows, d, dtype, 0);
    cuda::dropout_residual_add(gresidual.view, gbranch.view, two.sum.view, 0.1f, key);
    cuda::layernorm_forward(two.sum.view, ggamma.view, gbeta.view, two.y.view, two.mean.view,
                            two.rstd.view, kEps);
    dropout_residual_layernorm_forward(gresidual.view, gbranch.view, fused.sum.view, 0.1f, key,
                                       ggamma.view, gbeta.view, fused.y.view, fused.mean.view,
                                       fused.rstd.view, kEps);
    check_identical_forward("unaligned residual", download_forward(fused.sum.view, fused),
                            download_forward(two.sum.view, two));
  }
}

TEST_CASE("cuda layernorm_backward_dropout_bias equals layernorm_backward + dropout_backward_bias",
          "[cuda][layernorm][dropout][bias_grad_tails]") {
  for (DType dtype : kDtypes)
    for (int64_t d : kWidths)
      for (int64_t rows : kRowCounts)
        for (int offset : {0, 1}) check_backward(dtype, rows, d, offset);
}

TEST_CASE("cuda layernorm_backward_dropout_bias runs the two ops for an unaligned d_branch",
          "[cuda][layernorm][dropout][bias_grad_tails]") {
  // dy, x, gamma, dx aligned (layernorm_backward's packs), d_branch one element off: the op runs
  // the pair, d_branch_bias included, bit for bit.
  for (DType dtype : kDtypes) {
    const int64_t rows = 300, d = 512;
    INFO("dtype " << dtype_name(dtype));
    const std::vector<int64_t> shape{rows, d};
    const RngKey key{20250104, 5, 2};
    const std::vector<float> x = rounded(random_floats(rows * d, 5, -2.0f, 3.0f), dtype),
                             gamma = rounded(random_floats(d, 6, 0.5f, 1.5f), dtype),
                             dy = rounded(random_floats(rows * d, 7), dtype),
                             grad_init = random_floats(d, 8);
    const std::vector<float> mean(rows, 0.5f), rstd(rows, 0.8f);
    const GpuTensor gx = upload(x, shape, dtype), ggamma = upload(gamma, {d}, dtype),
                    gdy = upload(dy, shape, dtype), gmean = upload(mean, {rows}, DType::f32),
                    grstd = upload(rstd, {rows}, DType::f32);
    BackwardOutputs two(rows, d, dtype, 0, grad_init), fused(rows, d, dtype, 0, grad_init);
    fused.d_branch = gpu_poisoned(shape, dtype, 1);
    two.d_branch = gpu_poisoned(shape, dtype, 1);
    cuda::layernorm_backward(gdy.view, gx.view, ggamma.view, gmean.view, grstd.view, two.dx.view,
                             two.d_gamma.view, two.d_beta.view);
    cuda::dropout_backward_bias(two.dx.view, two.d_branch.view, 0.3f, key, two.d_branch_bias.view);
    layernorm_backward_dropout_bias(gdy.view, gx.view, ggamma.view, gmean.view, grstd.view,
                                    fused.dx.view, fused.d_gamma.view, fused.d_beta.view,
                                    fused.d_branch.view, 0.3f, key, fused.d_branch_bias.view);
    const BackwardHost expected = download_backward(two.dx.view, two),
                       got = download_backward(fused.dx.view, fused);
    check_identical_backward("unaligned d_branch", got, expected);
    check_identical("unaligned d_branch: d_branch_bias", got.d_branch_bias, expected.d_branch_bias);
  }
}

TEST_CASE(
    "cuda layernorm_backward_add_dropout_bias equals layernorm_backward_add + "
    "dropout_backward_bias",
    "[cuda][layernorm][dropout][bias_grad_tails]") {
  for (DType dtype : kDtypes)
    for (int64_t d : kWidths)
      for (int64_t rows : kRowCounts)
        for (int offset : {0, 1}) check_backward_add(dtype, rows, d, offset);
}

TEST_CASE("cuda layernorm_backward_add_dropout_bias runs the two ops for an unaligned d_branch",
          "[cuda][layernorm][dropout][bias_grad_tails]") {
  // dy, x, gamma, residual, dx aligned (layernorm_backward_add's packs), d_branch one element off:
  // the op runs the pair, d_branch_bias included, bit for bit; dx over the residual.
  for (DType dtype : kDtypes) {
    const int64_t rows = 300, d = 512;
    INFO("dtype " << dtype_name(dtype));
    const std::vector<int64_t> shape{rows, d};
    const RngKey key{20250106, 7, 3};
    const std::vector<float> x = rounded(random_floats(rows * d, 9, -2.0f, 3.0f), dtype),
                             gamma = rounded(random_floats(d, 10, 0.5f, 1.5f), dtype),
                             dy = rounded(random_floats(rows * d, 11), dtype),
                             residual = rounded(random_floats(rows * d, 12), dtype),
                             grad_init = random_floats(d, 13);
    const std::vector<float> mean(rows, 0.5f), rstd(rows, 0.8f);
    const GpuTensor gx = upload(x, shape, dtype), ggamma = upload(gamma, {d}, dtype),
                    gdy = upload(dy, shape, dtype), gresidual = upload(residual, shape, dtype),
                    gmean = upload(mean, {rows}, DType::f32),
                    grstd = upload(rstd, {rows}, DType::f32);
    BackwardOutputs two(rows, d, dtype, 0, grad_init), fused(rows, d, dtype, 0, grad_init);
    fused.d_branch = gpu_poisoned(shape, dtype, 1);
    two.d_branch = gpu_poisoned(shape, dtype, 1);
    cuda::layernorm_backward_add(gdy.view, gx.view, ggamma.view, gmean.view, grstd.view,
                                 gresidual.view, two.dx.view, two.d_gamma.view, two.d_beta.view);
    cuda::dropout_backward_bias(two.dx.view, two.d_branch.view, 0.3f, key, two.d_branch_bias.view);
    GpuTensor in_place = upload(residual, shape, dtype);
    layernorm_backward_add_dropout_bias(gdy.view, gx.view, ggamma.view, gmean.view, grstd.view,
                                        in_place.view, in_place.view, fused.d_gamma.view,
                                        fused.d_beta.view, fused.d_branch.view, 0.3f, key,
                                        fused.d_branch_bias.view);
    const BackwardHost expected = download_backward(two.dx.view, two),
                       got = download_backward(in_place.view, fused);
    check_identical_backward("unaligned d_branch", got, expected);
    check_identical("unaligned d_branch: d_branch_bias", got.d_branch_bias, expected.d_branch_bias);
  }
}

TEST_CASE("cuda LayerNorm tails reject mixed dtypes and host tensors, naming the op and tensor",
          "[cuda][layernorm][errors]") {
  const int64_t rows = 3, d = 8;
  const std::vector<int64_t> shape{rows, d};
  const std::vector<float> values(rows * d, 1.0f), row(d, 1.0f), stats(rows, 1.0f);
  GpuTensor a = upload(values, shape, DType::bf16), b = upload(values, shape, DType::bf16),
            c = upload(values, shape, DType::bf16), y = upload(values, shape, DType::bf16),
            half = upload(values, shape, DType::f16), gamma = upload(row, {d}, DType::bf16),
            beta = upload(row, {d}, DType::bf16), mean = upload(stats, {rows}, DType::f32),
            rstd = upload(stats, {rows}, DType::f32),
            bf16_stats = upload(stats, {rows}, DType::bf16), d_gamma = upload(row, {d}, DType::f32),
            d_beta = upload(row, {d}, DType::f32), d_branch_bias = upload(row, {d}, DType::f32);
  const auto has = [](const std::string& message, const char* what) {
    INFO("message: " << message);
    return message.find(what) != std::string::npos;
  };
  CHECK(has(invalid_argument_message([&] {
              cuda::dropout_residual_layernorm_forward(a.view, half.view, c.view, 0.1f, {},
                                                       gamma.view, beta.view, y.view, mean.view,
                                                       rstd.view, kEps);
            }),
            "dropout_residual_layernorm_forward: branch [3, 8] f16 cuda must have the dtype of "
            "residual"));
  CHECK(has(invalid_argument_message([&] {
              cuda::dropout_residual_layernorm_forward(a.view, b.view, c.view, 0.1f, {}, gamma.view,
                                                       beta.view, y.view, bf16_stats.view,
                                                       rstd.view, kEps);
            }),
            "dropout_residual_layernorm_forward: mean must be f32"));
  std::vector<float> host(rows * d);
  CHECK(has(invalid_argument_message([&] {
              Tensor host_y = cpu_view(host, shape);
              host_y.dtype = DType::bf16;
              cuda::dropout_residual_layernorm_forward(a.view, b.view, c.view, 0.1f, {}, gamma.view,
                                                       beta.view, host_y, mean.view, rstd.view,
                                                       kEps);
            }),
            "dropout_residual_layernorm_forward: y [3, 8] bf16 cpu must be on the GPU"));
  CHECK(has(invalid_argument_message([&] {
              cuda::layernorm_backward_dropout_bias(a.view, b.view, gamma.view, mean.view,
                                                    rstd.view, c.view, d_gamma.view, d_beta.view,
                                                    half.view, 0.1f, {}, d_branch_bias.view);
            }),
            "layernorm_backward_dropout_bias: d_branch [3, 8] f16 cuda must have the dtype of x"));
  CHECK(has(invalid_argument_message([&] {
              cuda::layernorm_backward_dropout_bias(a.view, b.view, gamma.view, mean.view,
                                                    rstd.view, c.view, d_gamma.view, d_beta.view,
                                                    y.view, 0.1f, {}, gamma.view);
            }),
            "layernorm_backward_dropout_bias: d_branch_bias must be f32"));
  CHECK(has(invalid_argument_message([&] {
              cuda::layernorm_backward_add_dropout_bias(
                  a.view, b.view, gamma.view, mean.view, rstd.view, half.view, c.view, d_gamma.view,
                  d_beta.view, y.view, 0.1f, {}, d_branch_bias.view);
            }),
            "layernorm_backward_add_dropout_bias: residual [3, 8] f16 cuda must have the dtype of "
            "x"));
  CHECK(has(invalid_argument_message([&] {
              cuda::layernorm_backward_add_dropout_bias(
                  a.view, b.view, gamma.view, mean.view, rstd.view, c.view, c.view, d_gamma.view,
                  d_beta.view, half.view, 0.1f, {}, d_branch_bias.view);
            }),
            "layernorm_backward_add_dropout_bias: d_branch [3, 8] f16 cuda must have the dtype of "
            "x"));
  CHECK(has(invalid_argument_message([&] {
              cuda::layernorm_backward_add_dropout_bias(a.view, b.view, gamma.view, mean.view,
                                                        rstd.view, c.view, c.view, d_gamma.view,
                                                        d_beta.view, y.view, 0.1f, {}, gamma.view);
            }),
            "layernorm_backward_add_dropout_bias: d_branch_bias must be f32"));
  CHECK(has(invalid_argument_message([&] {
              cuda::layernorm_backward_add_dropout_bias(
                  a.view, b.view, gamma.view, mean.view, rstd.view, c.view, c.view, d_gamma.view,
                  d_beta.view, c.view, 0.1f, {}, d_branch_bias.view);
            }),
            "layernorm_backward_add_dropout_bias: d_branch [3, 8] bf16 cuda must not overlap"));
}

}  // namespace nmt::test
