// CUDA fused softmax cross-entropy against the CPU reference: loss sums, argmax counts and the
// gradient, with label smoothing, padding rows, in place, loss only, and each row kernel (shared
// memory, registers, streaming, unaligned) on both sides of the size cuts between them.
#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernels/cross_entropy.h"
#include "kernels/cuda/cross_entropy.h"
#include "test/cuda/gpu_test_util.h"
#include "test/support/catch.h"

namespace nmt::test {
namespace {

constexpr int32_t kPad = 1;

struct CpuLoss {
  LossSums sums;
  std::vector<float> grad;
};

CpuLoss cpu_loss(std::vector<float> logits, std::vector<int32_t> targets, int64_t rows,
                 int64_t vocab, float smoothing, float grad_scale) {
  CpuLoss r;
  r.grad.resize(rows * vocab);
  Tensor grad = cpu_view(r.grad, {rows, vocab});
  r.sums =
      cross_entropy_forward_backward(cpu_view(logits, {rows, vocab}), cpu_view_i32(targets, {rows}),
                                     kPad, smoothing, grad_scale, grad);
  return r;
}

void check_sum(const char* what, DType dtype, double gpu, double ref, double base, int64_t tokens) {
  const double bound = (dtype == DType::f32 ? 0.0 : 2.0 * std::fabs(base - ref)) +
                       1e-5 * std::fabs(ref) + 1e-5 * static_cast<double>(tokens);
  INFO(what << " gpu " << gpu << " ref " << ref << " baseline " << base);
  CHECK(std::fabs(gpu - ref) <= bound);
}

// The fp32 reference and the same reference on logits rounded to the dtype (the error a
// straightforward kernel in that dtype makes).
struct Reference {
  CpuLoss ref, base;
};

Reference reference(const std::vector<float>& logits, const std::vector<int32_t>& targets,
                    int64_t rows, int64_t vocab, DType dtype, float smoothing, float grad_scale) {
  return Reference{cpu_loss(logits, targets, rows, vocab, smoothing, grad_scale),
                   cpu_loss(rounded(logits, dtype), targets, rows, vocab, smoothing, grad_scale)};
}

// The CUDA op against the reference: sums, argmax count and gradient; then in place (d_logits
// aliases logits: the same bits), without a gradient (the same sums) and the enqueue-only form
// (the same sums and gradient).
void check_against_reference(const Reference& r, const std::vector<float>& logits,
                             const std::vector<int32_t>& targets, int64_t rows, int64_t vocab,
                             DType dtype, float smoothing, float grad_scale) {
  GpuTensor gl = upload(logits, {rows, vocab}, dtype);
  GpuTensor gt = upload_i32(targets, {rows});
  GpuTensor gg = gpu_poisoned({rows, vocab}, dtype);
  const LossSums sums =
      cuda::cross_entropy_forward_backward(gl.view, gt.view, kPad, smoothing, grad_scale, gg.view);
  CHECK(sums.tokens == r.ref.sums.tokens);
  CHECK(sums.correct == r.base.sums.correct);  // the same (rounded) logits: the same argmax
  check_sum("loss", dtype, sums.loss, r.ref.sums.loss, r.base.sums.loss, sums.tokens);
  check_sum("nll", dtype, sums.nll, r.ref.sums.nll, r.base.sums.nll, sums.tokens);
  const std::vector<float> grad = download(gg.view);
  check_close("d_logits", dtype, grad, r.ref.grad, rounded(r.base.grad, dtype));

  Tensor none;
  const LossSums no_grad =
      cuda::cross_entropy_forward_backward(gl.view, gt.view, kPad, smoothing, grad_scale, none);
  CHECK(no_grad.loss == sums.loss);
  CHECK(no_grad.nll == sums.nll);
  CHECK(no_grad.correct == sums.correct);
  const LossSums in_place =
      cuda::cross_entropy_forward_backward(gl.view, gt.view, kPad, smoothing, grad_scale, gl.view);
  CHECK(in_place.loss == sums.loss);
  check_identical("d_logits in place", download(gl.view), grad);

  GpuTensor gl2 = upload(logits, {rows, vocab}, dtype);
  GpuTensor sums_buffer = upload_i32(std::vector<int32_t>(kLossSumsWords, -1), {kLossSumsWords});
  cross_entropy_forward_backward_into(gl2.view, gt.view, kPad, smoothing, grad_scale, gl2.view,
                                      sums_buffer.view);
  const LossSums deferred = read_loss_sums(sums_buffer.view, vocab);
  CHECK(deferred.loss == sums.loss);
  CHECK(deferred.nll == sums.nll);
  CHECK(deferred.tokens == sums.tokens);
  CHECK(deferred.correct == sums.correct);
  check_identical("d_logits, sums into a buffer", download(gl2.view), grad);
}

// Sets the shared-memory kernel's switch for a test case and restores it after.
struct SmemSwitchGuard {
  bool was = cuda::cross_entropy_smem();
  ~SmemSwitchGuard() { cuda::set_cross_entropy_smem(was); }
};

}  // namespace

TEST_CASE("cuda cross-entropy matches the CPU reference", "[cuda][cross_entropy]") {
  struct Case {
    int64_t rows, vocab;
  };
  // 40000 takes the streaming path; odd vocabularies the unaligned one; 32000 is the shipped
  // configs' vocabulary. The next test case places each row kernel's cuts.
  const Case cases[] = {{1, 1},     {7, 7},     {7, 33},    {100, 1000}, {33, 4104},
                        {9, 16392}, {4, 32000}, {5, 32768}, {3, 40000}};
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
    for (const Case& c : cases)
      for (float smoothing : {0.0f, 0.1f}) {
        const int64_t rows = c.rows, vocab = c.vocab;
        INFO("dtype " << dtype_name(dtype) << " rows " << rows << " vocab " << vocab
                      << " smoothing " << smoothing);
        const uint64_t seed = static_cast<uint64_t>(rows * 31 + vocab);
        std::vector<float> logits = random_floats(rows * vocab, seed, -4.0f, 4.0f);
        std::vector<int32_t> targets(rows);
        const std::vector<float> picks = random_floats(rows, seed + 1, 0.0f, 1.0f);
        for (int64_t r = 0; r < rows; ++r)
          targets[r] = r % 5 == 3 ? kPad : static_cast<int32_t>(picks[r] * (vocab - 1) + 0.5f);
        const float grad_scale = 0.5f;
        const Reference r = reference(logits, targets, rows, vocab, dtype, smoothing, grad_scale);
        check_against_reference(r, logits, targets, rows, vocab, dtype, smoothing, grad_scale);
      }
}

TEST_CASE("cuda cross-entropy: the shared-memory and the register row kernels",
          "[cuda][cross_entropy]") {
  struct Case {
    DType dtype;
    int64_t rows, vocab;
    bool smem;  // takes the shared-memory kernel when the switch is on (an H100 or H200)
  };
  // The shared-memory kernel takes rows of 512 to 4608 packs (72 KiB): 16-bit vocabularies of
  // 4096 to 36864, f32 ones of 2048 to 18432; each cut is tried on both sides.
  const Case cases[] = {
      {DType::bf16, 1, 32000, true}, {DType::bf16, 3, 32768, true}, {DType::bf16, 257, 32000, true},
      {DType::bf16, 3, 24000, true}, {DType::bf16, 257, 40, false}, {DType::bf16, 3, 4096, true},
      {DType::bf16, 3, 4088, false}, {DType::bf16, 3, 36864, true}, {DType::bf16, 3, 36872, false},
      {DType::f16, 1, 32000, true},  {DType::f16, 3, 32768, true},  {DType::f16, 257, 24000, true},
      {DType::f16, 257, 40, false},  {DType::f16, 3, 36872, false}, {DType::f32, 3, 32000, false},
      {DType::f32, 1, 18432, true},  {DType::f32, 3, 18436, false}, {DType::f32, 257, 2048, true},
      {DType::f32, 3, 2044, false},  {DType::f32, 3, 24000, false}};
  SmemSwitchGuard guard;
  for (const Case& c : cases)
    for (float smoothing : {0.0f, 0.1f}) {
      const int64_t rows = c.rows, vocab = c.vocab;
      const uint64_t seed = static_cast<uint64_t>(rows * 131 + vocab);
      const std::vector<float> logits = random_floats(rows * vocab, seed, -4.0f, 4.0f);
      // Every third row padding; the others aim at a random entry, the last or the first.
      std::vector<int32_t> targets(rows);
      const std::vector<float> picks = random_floats(rows, seed + 1, 0.0f, 1.0f);
      for (int64_t r = 0; r < rows; ++r)
        targets[r] = r % 3 == 1   ? kPad
                     : r % 6 == 2 ? static_cast<int32_t>(vocab - 1)
                     : r % 6 == 5 ? 0
                                  : static_cast<int32_t>(picks[r] * (vocab - 1) + 0.5f);
      const float grad_scale = 0.25f;
      const Reference r = reference(logits, targets, rows, vocab, c.dtype, smoothing, grad_scale);
      for (bool smem : {true, false}) {
        INFO("dtype " << dtype_name(c.dtype) << " rows " << rows << " vocab " << vocab
                      << " smoothing " << smoothing << " switch " << smem);
        cuda::set_cross_entropy_smem(smem);
        CHECK(cuda::cross_entropy_smem_rows(c.dtype, vocab) == (smem && c.smem));
        check_against_reference(r, logits, targets, rows, vocab, c.dtype, smoothing, grad_scale);
      }
    }
}

TEST_CASE("cuda cross-entropy counts the first of tied maxima", "[cuda][cross_entropy]") {
  // The row's maximum 6 at four entries owned by different threads, warps and packs of either
  // kernel; the entry before them is the argmax. Rows 0 and 2 aim at it (correct), rows 1 and 3 at
  // a later tie (wrong).
  const int64_t rows = 4;
  const int32_t ties[] = {8272, 4807, 8897, 4806};
  SmemSwitchGuard guard;
  for (DType dtype : {DType::bf16, DType::f16, DType::f32})
    for (int64_t vocab : {int64_t{16384}, int64_t{32000}})
      for (bool smem : {true, false}) {
        INFO("dtype " << dtype_name(dtype) << " vocab " << vocab << " switch " << smem);
        std::vector<float> logits = random_floats(rows * vocab, 77, -4.0f, 4.0f);
        for (int64_t r = 0; r < rows; ++r)
          for (int32_t t : ties) logits[r * vocab + t] = 6.0f;
        std::vector<int32_t> targets{4806, 8272, 4806, 4807};
        cuda::set_cross_entropy_smem(smem);
        GpuTensor gl = upload(logits, {rows, vocab}, dtype);
        GpuTensor gt = upload_i32(targets, {rows});
        Tensor none;
        const LossSums sums =
            cuda::cross_entropy_forward_backward(gl.view, gt.view, kPad, 0.1f, 1.0f, none);
        CHECK(sums.tokens == rows);
        CHECK(sums.correct == 2);
      }
}

TEST_CASE("cuda cross-entropy rejects a target outside the vocabulary", "[cuda][cross_entropy]") {
  std::vector<float> logits = random_floats(3 * 10, 1);
  std::vector<int32_t> targets{2, 10, kPad};
  GpuTensor gl = upload(logits, {3, 10}, DType::f32), gt = upload_i32(targets, {3});
  Tensor none;
  CHECK_THROWS_AS(cuda::cross_entropy_forward_backward(gl.view, gt.view, kPad, 0.1f, 1.0f, none),
                  std::invalid_argument);
  // The enqueue-only form reports it when its sums are read.
  GpuTensor sums = upload_i32(std::vector<int32_t>(kLossSumsWords, -1), {kLossSumsWords});
  cross_entropy_forward_backward_into(gl.view, gt.view, kPad, 0.1f, 1.0f, none, sums.view);
  CHECK_THROWS_AS(read_loss_sums(sums.view, 10), std::invalid_argument);

  // The same from the shared-memory kernel's rows (bf16 [3, 32000]).
  const int64_t vocab = 32000;
  std::vector<float> wide = random_floats(3 * vocab, 2);
  std::vector<int32_t> wide_targets{5, static_cast<int32_t>(vocab), -2};
  GpuTensor wl = upload(wide, {3, vocab}, DType::bf16), wt = upload_i32(wide_targets, {3});
  GpuTensor wg = gpu_poisoned({3, vocab}, DType::bf16);
  CHECK_THROWS_AS(cuda::cross_entropy_forward_backward(wl.view, wt.view, kPad, 0.1f, 1.0f, wg.view),
                  std::invalid_argument);
}

}  // namespace nmt::test
