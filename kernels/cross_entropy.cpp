// Dispatch of the fused softmax cross-entropy (kernels/cross_entropy.h) to the CPU or CUDA backend.
#include "kernels/cross_entropy.h"

#include <stdexcept>
#include <string>

#include "kernels/cpu/cross_entropy.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/op_checks.h"

namespace nmt {

LossSums cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets, int32_t pad_id,
                                        float smoothing, float grad_scale, Tensor& d_logits) {
  constexpr const char* op = "cross_entropy_forward_backward";
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
  check_same_device(op, {&logits, &targets, &d_logits});
  if (detail::call_device({&logits, &targets, &d_logits}) == Device::cuda)
    return cuda::cross_entropy_forward_backward(logits, targets, pad_id, smoothing, grad_scale, d_logits);
  return cpu::cross_entropy_forward_backward(
      detail::cpu_f32(op, "logits", logits), detail::cpu_i32(op, "targets", targets), rows, vocab,
      pad_id, smoothing, grad_scale,
      d_logits.empty() ? nullptr : detail::cpu_f32(op, "d_logits", d_logits));
}

}  // namespace nmt
