// Dynamic loss scale: halve on overflow, double after a window of clean steps.
#include "engine/train/loss_scaler.h"

#include <algorithm>
#include <stdexcept>

namespace nmt {

LossScaler::LossScaler(DType dtype, double initial, int64_t window)
    : dynamic_(dtype == DType::f16), scale_(dtype == DType::f16 ? initial : 1.0), window_(window) {
  if (dynamic_ && !(initial >= 1.0))
    throw std::invalid_argument("train.loss_scale must be at least 1");
  if (window < 1) throw std::invalid_argument("train.loss_scale_window must be at least 1");
}

void LossScaler::update(bool overflow) {
  if (!dynamic_) return;
  if (overflow) {
    scale_ = std::max(kMinScale, scale_ / 2);
    clean_steps_ = 0;
    return;
  }
  if (++clean_steps_ >= window_) {
    scale_ = std::min(kMaxScale, scale_ * 2);
    clean_steps_ = 0;
  }
}

nlohmann::json LossScaler::to_json() const {
  return {{"scale", scale_}, {"clean_steps", clean_steps_}};
}

void LossScaler::restore(const nlohmann::json& state) {
  if (!dynamic_) return;
  if (!state.is_object() || !state.contains("scale") || !state["scale"].is_number() ||
      !state.contains("clean_steps") || !state["clean_steps"].is_number_integer())
    throw std::runtime_error("loss_scaler: expected {\"scale\": number, \"clean_steps\": integer}");
  double scale = state["scale"].get<double>();
  if (!(scale >= kMinScale && scale <= kMaxScale))
    throw std::runtime_error("loss_scaler: scale " + std::to_string(scale) + " is out of range");
  scale_ = scale;
  clean_steps_ = state["clean_steps"].get<int64_t>();
}

}  // namespace nmt
