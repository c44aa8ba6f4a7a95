// CPU reference of the fused softmax cross-entropy with label smoothing and padding targets.
#pragma once

#include <cstdint>

#include "kernels/cross_entropy.h"

namespace nmt::cpu {

// logits: [rows, vocab]; targets: [rows] i32 (pad_id rows count nothing, get zero gradient);
// d_logits: [rows, vocab] written with grad_scale * (softmax - q), or nullptr; may alias logits.
// Throws std::invalid_argument for a target outside [0, vocab) that is not pad_id.
LossSums cross_entropy_forward_backward(const float* logits, const int32_t* targets, int64_t rows,
                                        int64_t vocab, int32_t pad_id, float smoothing,
                                        float grad_scale, float* d_logits);

}  // namespace nmt::cpu
