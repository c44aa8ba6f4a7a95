// Learning-rate schedules: OpenSeq2Seq's transformer_policy, inverse square root with linear
// warmup (fairseq's), constant, and warmup followed by a cosine or linear decay to a final rate
// at a planned step (fairseq's cosine and polynomial_decay with power 1).
#pragma once

#include <cstdint>

#include "engine/config/config.h"

namespace nmt {

// The learning rate at 1-based `step`.
//   transformer_policy: learning_rate * d_model^-0.5 * min(step * warmup^-1.5, step^-0.5)
//   inverse_sqrt:       warmup_init_lr + (learning_rate - warmup_init_lr) * step / warmup while
//                       step < warmup, then learning_rate * sqrt(warmup / step)
//   constant:           learning_rate
//   cosine, linear:     the same warmup, then from learning_rate at `warmup` to final_lr at
//                       decay_steps: final + (lr - final) * (1 + cos(pi * t)) / 2, or
//                       lr + (final - lr) * t, with t = (step - warmup) / (decay_steps - warmup);
//                       final_lr after. decay_steps must be resolved (decay_end) and > warmup:
//                       std::invalid_argument otherwise.
double learning_rate_at(const LrScheduleConfig& cfg, int64_t d_model, int64_t step);

}  // namespace nmt
