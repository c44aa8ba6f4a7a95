// Learning-rate schedules.
#include "engine/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace nmt {

double learning_rate_at(const LrScheduleConfig& cfg, int64_t d_model, int64_t step) {
  double s = static_cast<double>(std::max<int64_t>(step, 1));
  double warmup = static_cast<double>(std::max<int64_t>(cfg.warmup_steps, 1));
  switch (cfg.policy) {
    case LrPolicy::transformer_policy:
      return cfg.learning_rate / std::sqrt(static_cast<double>(d_model)) *
             std::min(s * std::pow(warmup, -1.5), 1.0 / std::sqrt(s));
    case LrPolicy::inverse_sqrt:
      if (s < warmup) return cfg.warmup_init_lr + (cfg.learning_rate - cfg.warmup_init_lr) * s / warmup;
      return cfg.learning_rate * std::sqrt(warmup / s);
    case LrPolicy::constant:
      return cfg.learning_rate;
  }
  return cfg.learning_rate;
}

}  // namespace nmt
