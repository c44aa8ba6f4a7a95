// CUDA fused softmax cross-entropy against the CPU reference: loss sums, argmax counts and the
// gradient, with label smoothing, padding rows, in place, and the register and streaming paths.
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

}  // namespace

TEST_CASE("cuda cross-entropy matches the CPU reference", "[cuda][cross_entropy]") {
  struct Case {
    int64_t rows, vocab;
  };
  // 40000 takes the streaming path; odd vocabularies the unaligned one; 32000 is the shipped
  // configs' vocabulary.
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
        const CpuLoss ref = cpu_loss(logits, targets, rows, vocab, smoothing, grad_scale);
        const CpuLoss base =
            cpu_loss(rounded(logits, dtype), targets, rows, vocab, smoothing, grad_scale);

        GpuTensor gl = upload(logits, {rows, vocab}, dtype);
        GpuTensor gt = upload_i32(targets, {rows});
        GpuTensor gg = gpu_poisoned({rows, vocab}, dtype);
        const LossSums sums = cuda::cross_entropy_forward_backward(gl.view, gt.view, kPad,
                                                                   smoothing, grad_scale, gg.view);
        CHECK(sums.tokens == ref.sums.tokens);
        CHECK(sums.correct == base.sums.correct);  // the same (rounded) logits: the same argmax
        check_sum("loss", dtype, sums.loss, ref.sums.loss, base.sums.loss, sums.tokens);
        check_sum("nll", dtype, sums.nll, ref.sums.nll, base.sums.nll, sums.tokens);
        const std::vector<float> grad = download(gg.view);
        check_close("d_logits", dtype, grad, ref.grad, rounded(base.grad, dtype));

        // In place (d_logits aliases logits) gives the same bits; no gradient gives the same sums.
        Tensor none;
        const LossSums no_grad = cuda::cross_entropy_forward_backward(gl.view, gt.view, kPad,
                                                                      smoothing, grad_scale, none);
        CHECK(no_grad.loss == sums.loss);
        CHECK(no_grad.correct == sums.correct);
        const LossSums in_place = cuda::cross_entropy_forward_backward(
            gl.view, gt.view, kPad, smoothing, grad_scale, gl.view);
        CHECK(in_place.loss == sums.loss);
        check_identical("d_logits in place", download(gl.view), grad);

        // The enqueue-only form leaves the same sums on the device (and the same gradient).
        GpuTensor gl2 = upload(logits, {rows, vocab}, dtype);
        GpuTensor sums_buffer =
            upload_i32(std::vector<int32_t>(kLossSumsWords, -1), {kLossSumsWords});
        cross_entropy_forward_backward_into(gl2.view, gt.view, kPad, smoothing, grad_scale,
                                            gl2.view, sums_buffer.view);
        const LossSums deferred = read_loss_sums(sums_buffer.view, vocab);
        CHECK(deferred.loss == sums.loss);
        CHECK(deferred.nll == sums.nll);
        CHECK(deferred.tokens == sums.tokens);
        CHECK(deferred.correct == sums.correct);
        check_identical("d_logits, sums into a buffer", download(gl2.view), grad);
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
}

}  // namespace nmt::test
