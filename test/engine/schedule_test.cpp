// Learning-rate schedules against their formulas.
#include <cmath>
#include <stdexcept>

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

TEST_CASE("cosine and linear warm up, then decay to final_lr at decay_steps", "[engine]") {
  nmt::LrScheduleConfig c;
  c.learning_rate = 2e-3;
  c.warmup_steps = 100;
  c.decay_steps = 300;
  c.final_lr = 2e-4;
  for (auto policy : {nmt::LrPolicy::cosine, nmt::LrPolicy::linear}) {
    c.policy = policy;
    CHECK(nmt::learning_rate_at(c, 512, 50) == Approx(1e-3));
    CHECK(nmt::learning_rate_at(c, 512, 100) == Approx(2e-3));
    CHECK(nmt::learning_rate_at(c, 512, 200) == Approx(1.1e-3));  // halfway, both shapes
    CHECK(nmt::learning_rate_at(c, 512, 300) == Approx(2e-4));
    CHECK(nmt::learning_rate_at(c, 512, 5000) == Approx(2e-4));
  }
  c.policy = nmt::LrPolicy::cosine;
  CHECK(nmt::learning_rate_at(c, 512, 150) ==
        Approx(2e-4 + 1.8e-3 * 0.5 * (1 + std::cos(3.141592653589793 / 4))));
  c.policy = nmt::LrPolicy::linear;
  CHECK(nmt::learning_rate_at(c, 512, 150) == Approx(2e-3 - 1.8e-3 / 4));
  c.decay_steps = 100;  // unresolved or not after the warmup
  CHECK_THROWS_AS(nmt::learning_rate_at(c, 512, 150), std::invalid_argument);
  CHECK(nmt::decay_end(c, 4000) == 100);
  c.decay_steps = 0;
  CHECK(nmt::decay_end(c, 4000) == 4000);
}
