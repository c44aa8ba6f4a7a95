// Learning-rate schedules: OpenSeq2Seq's transformer_policy, inverse square root with linear
// warmup (fairseq's), and constant.
#pragma once

#include <cstdint>

#include "engine/config/config.h"

namespace nmt {

// The learning rate at 1-based `step`.
//   transformer_policy: learning_rate * d_model^-0.5 * min(step * warmup^-1.5, step^-0.5)
//   inverse_sqrt:       warmup_init_lr + (learning_rate - warmup_init_lr) * step / warmup while
//                       step < warmup, then learning_rate * sqrt(warmup / step)
//   constant:           learning_rate
double learning_rate_at(const LrScheduleConfig& cfg, int64_t d_model, int64_t step);

}  // namespace nmt
