// Learning-rate schedules.
#include "engine/train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace nmt {

double learning_rate_at(const LrScheduleConfig& cfg, int64_t d_model, int64_t step) {
  double s = static_cast<double>(std::max<int64_t>(step, 1));
  double warmup = static_cast<double>(std::max<int64_t>(cfg.warmup_steps, 1));
  switch (cfg.policy) {
    case LrPolicy::transformer_policy:
      return cfg.learning_rate / std::sqrt(static_cast<double>(d_model)) *
             std::min(s * std::pow(warmup, -1.5), 1.0 / std::sqrt(s));
    case LrPolicy::inverse_sqrt:
      if (s < warmup)
        return cfg.warmup_init_lr + (cfg.learning_rate - cfg.warmup_init_lr) * s / warmup;
      return cfg.learning_rate * std::sqrt(warmup / s);
    case LrPolicy::constant:
      return cfg.learning_rate;
    case LrPolicy::cosine:
    case LrPolicy::linear: {
      if (cfg.decay_steps <= cfg.warmup_steps)
        throw std::invalid_argument("learning rate: the decay ends at step " +
                                    std::to_string(cfg.decay_steps) + ", not after the warmup's " +
                                    std::to_string(cfg.warmup_steps) + " steps");
      if (s < warmup && cfg.warmup_steps > 0)
        return cfg.warmup_init_lr + (cfg.learning_rate - cfg.warmup_init_lr) * s / warmup;
      const double span = static_cast<double>(cfg.decay_steps - cfg.warmup_steps);
      const double t = std::min(1.0, (s - static_cast<double>(cfg.warmup_steps)) / span);
      if (cfg.policy == LrPolicy::linear)
        return cfg.learning_rate + (cfg.final_lr - cfg.learning_rate) * t;
      return cfg.final_lr +
             (cfg.learning_rate - cfg.final_lr) * 0.5 * (1.0 + std::cos(3.141592653589793 * t));
    }
  }
  return cfg.learning_rate;
}

}  // namespace nmt
