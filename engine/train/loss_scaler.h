// Dynamic loss scaling for fp16 training: the loss (and so every gradient) is multiplied by a
// scale large enough that small fp16 activation gradients do not flush to zero; an inf/NaN
// gradient halves it (the step is skipped), and a window of clean steps doubles it. bf16 and fp32
// run with a fixed scale of 1.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "kernels/tensor.h"

namespace nmt {

class LossScaler {
 public:
  // dtype: the compute dtype; only f16 scales. initial: the first scale; window: clean steps
  // before it doubles.
  LossScaler(DType dtype, double initial, int64_t window);

  bool dynamic() const { return dynamic_; }
  double scale() const { return scale_; }
  // After each optimizer step: `overflow` when the gradient was not finite (the step was skipped).
  void update(bool overflow);

  // Checkpoint state ({"scale", "clean_steps"}); restore throws naming a bad field.
  nlohmann::json to_json() const;
  void restore(const nlohmann::json& state);

 private:
  static constexpr double kMinScale = 1.0 / 65536;  // below this the model itself overflows
  static constexpr double kMaxScale = 16777216;     // 2^24: beyond fp16's range for any use
  bool dynamic_;
  double scale_;
  int64_t window_;
  int64_t clean_steps_ = 0;
};

}  // namespace nmt
