// Dispatch of the fused softmax cross-entropy (kernels/cross_entropy.h) to the CPU or CUDA backend.
#include "kernels/cross_entropy.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/cross_entropy.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/op_checks.h"

namespace nmt {

namespace {

// The checks of both forms.
void check_cross_entropy(const char* op, const Tensor& logits, const Tensor& targets,
                         float smoothing, const Tensor& d_logits) {
  detail::require_rank(op, "logits", logits, 2, "[rows, vocab]");
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  check_shape(op, "targets", targets, {rows});
  if (!d_logits.empty()) check_shape(op, "d_logits", d_logits, {rows, vocab});
  detail::require_dtype(op, "targets", targets, DType::i32);
  if (!(smoothing >= 0.0f && smoothing <= 1.0f))
    throw std::invalid_argument(std::string(op) + ": label smoothing " + std::to_string(smoothing) +
                                " is outside [0, 1]");
  if (vocab < 1 && rows > 0)
    throw std::invalid_argument(std::string(op) + ": logits " + logits.shape_string() +
                                " has no vocabulary");
}

LossSums cpu_cross_entropy(const char* op, const Tensor& logits, const Tensor& targets,
                           int32_t pad_id, float smoothing, float grad_scale, Tensor& d_logits) {
  return cpu::cross_entropy_forward_backward(
      detail::cpu_f32(op, "logits", logits), detail::cpu_i32(op, "targets", targets), logits.dim(0),
      logits.dim(1), pad_id, smoothing, grad_scale,
      d_logits.empty() ? nullptr : detail::cpu_f32(op, "d_logits", d_logits));
}

// The CPU's sums in a [kLossSumsWords] i32 buffer: the sums bytes as they are.
static_assert(sizeof(LossSums) <= kLossSumsWords * sizeof(int32_t));

void check_sums_buffer(const char* op, const Tensor& sums) {
  check_shape(op, "sums", sums, {kLossSumsWords});
  detail::require_dtype(op, "sums", sums, DType::i32);
}

}  // namespace

LossSums cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets, int32_t pad_id,
                                        float smoothing, float grad_scale, Tensor& d_logits) {
  constexpr const char* op = "cross_entropy_forward_backward";
  check_cross_entropy(op, logits, targets, smoothing, d_logits);
  check_same_device(op, {&logits, &targets, &d_logits});
  if (detail::call_device({&logits, &targets, &d_logits}) == Device::cuda)
    return cuda::cross_entropy_forward_backward(logits, targets, pad_id, smoothing, grad_scale,
                                                d_logits);
  return cpu_cross_entropy(op, logits, targets, pad_id, smoothing, grad_scale, d_logits);
}

void cross_entropy_forward_backward_into(const Tensor& logits, const Tensor& targets,
                                         int32_t pad_id, float smoothing, float grad_scale,
                                         Tensor& d_logits, Tensor& sums) {
  constexpr const char* op = "cross_entropy_forward_backward_into";
  check_cross_entropy(op, logits, targets, smoothing, d_logits);
  check_sums_buffer(op, sums);
  check_same_device(op, {&logits, &targets, &d_logits, &sums});
  if (detail::call_device({&logits, &targets, &d_logits, &sums}) == Device::cuda)
    return cuda::cross_entropy_forward_backward_into(logits, targets, pad_id, smoothing, grad_scale,
                                                     d_logits, sums);
  const LossSums result =
      cpu_cross_entropy(op, logits, targets, pad_id, smoothing, grad_scale, d_logits);
  std::memcpy(sums.data, &result, sizeof(result));
}

LossSums read_loss_sums(const Tensor& sums, int64_t vocab) {
  check_sums_buffer("read_loss_sums", sums);
  if (sums.device == Device::cuda) return cuda::read_loss_sums(sums, vocab);
  LossSums result;
  std::memcpy(&result, sums.data, sizeof(result));
  return result;
}

}  // namespace nmt
