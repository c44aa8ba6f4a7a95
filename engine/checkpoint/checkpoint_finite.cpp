// describe_non_finite: one pass over a host copy of the flat parameter layout.
#include "engine/checkpoint/checkpoint_finite.h"

#include <cmath>

namespace nmt {

std::string describe_non_finite(const std::vector<float>& flat, const ParamStore& params,
                                const std::string& suffix) {
  for (const Param& p : params.params()) {
    const float* values = flat.data() + p.offset;
    for (int64_t i = 0; i < p.numel; ++i) {
      if (std::isfinite(values[i])) continue;
      const char* what = std::isnan(values[i]) ? "NaN" : (values[i] > 0 ? "+inf" : "-inf");
      return p.name + suffix + " holds " + what + " (element " + std::to_string(i) + " of " +
             std::to_string(p.numel) + ")";
    }
  }
  return "";
}

}  // namespace nmt
