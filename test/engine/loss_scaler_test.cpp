// The dynamic loss scale: fixed at 1 for bf16/fp32, halves on overflow, doubles after a window of
// clean steps, survives a checkpoint round trip, rejects a corrupt saved state.
#include "engine/train/loss_scaler.h"

#include <stdexcept>

#include "test/support/catch.h"

TEST_CASE("loss scale: bf16 and fp32 keep 1, fp16 halves on overflow and doubles after a window",
          "[cpu][mixed]") {
  for (nmt::DType dtype : {nmt::DType::f32, nmt::DType::bf16}) {
    nmt::LossScaler fixed(dtype, 1024, 2);
    fixed.update(true);
    CHECK(!fixed.dynamic());
    CHECK(fixed.scale() == 1.0);
  }
  nmt::LossScaler s(nmt::DType::f16, 1024, 3);
  CHECK(s.dynamic());
  s.update(false);
  s.update(false);
  s.update(true);  // overflow resets the clean-step count
  CHECK(s.scale() == 512);
  s.update(false);
  s.update(false);
  CHECK(s.scale() == 512);
  s.update(false);
  CHECK(s.scale() == 1024);

  nmt::LossScaler restored(nmt::DType::f16, 1, 3);
  s.update(false);
  restored.restore(s.to_json());
  CHECK(restored.scale() == 1024);
  restored.update(false);
  restored.update(false);  // the saved clean step counts toward the window
  CHECK(restored.scale() == 2048);

  CHECK_THROWS_AS(restored.restore(nlohmann::json{{"scale", "big"}}), std::runtime_error);
  CHECK_THROWS_AS(restored.restore(nlohmann::json{{"scale", -1.0}, {"clean_steps", 0}}),
                  std::runtime_error);
}
