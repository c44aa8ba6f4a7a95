// Learning-rate schedules against their formulas.
#include <cmath>

#include "engine/train/lr_schedule.h"
#include "test/support/catch.h"

TEST_CASE("transformer_policy follows lr * d^-0.5 * min(step * warmup^-1.5, step^-0.5)", "[engine]") {
  nmt::LrScheduleConfig c;
  c.policy = nmt::LrPolicy::transformer_policy;
  c.learning_rate = 2.0;
  c.warmup_steps = 8000;
  double peak = 2.0 / std::sqrt(512.0) / std::sqrt(8000.0);
  CHECK(nmt::learning_rate_at(c, 512, 8000) == Approx(peak));
  CHECK(nmt::learning_rate_at(c, 512, 4000) == Approx(peak / 2));
  CHECK(nmt::learning_rate_at(c, 512, 32000) == Approx(peak / 2));
  CHECK(nmt::learning_rate_at(c, 512, 1) == Approx(2.0 / std::sqrt(512.0) * std::pow(8000.0, -1.5)));
}

TEST_CASE("inverse_sqrt warms up linearly then decays with 1/sqrt(step)", "[engine]") {
  nmt::LrScheduleConfig c;
  c.policy = nmt::LrPolicy::inverse_sqrt;
  c.learning_rate = 1e-3;
  c.warmup_steps = 100;
  c.warmup_init_lr = 1e-7;
  CHECK(nmt::learning_rate_at(c, 512, 50) == Approx(1e-7 + (1e-3 - 1e-7) * 0.5));
  CHECK(nmt::learning_rate_at(c, 512, 100) == Approx(1e-3));
  CHECK(nmt::learning_rate_at(c, 512, 400) == Approx(5e-4));
  c.policy = nmt::LrPolicy::constant;
  CHECK(nmt::learning_rate_at(c, 512, 400) == Approx(1e-3));
}
