// Seeded random data and the central-difference gradient checker shared by the test suites.
#include "test/support/lib/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <stdexcept>

namespace nmt::test {

std::vector<float> random_uniform(size_t n, uint32_t seed, float lo, float hi) {
  std::vector<float> values(n);
  fill_uniform(values, seed, lo, hi);
  return values;
}

void fill_uniform(std::vector<float>& values, uint32_t seed, float lo, float hi) {
  std::mt19937 bits(seed);
  for (float& value : values) {
    const double unit = static_cast<double>(bits() >> 8) * (1.0 / 16777216.0);  // [0, 1)
    value = static_cast<float>(lo + (static_cast<double>(hi) - lo) * unit);
  }
}

double weighted_sum(const std::vector<float>& values, const std::vector<float>& weights) {
  if (values.size() != weights.size())
    throw std::invalid_argument("weighted_sum: " + std::to_string(values.size()) + " values but " +
                                std::to_string(weights.size()) + " weights");
  double sum = 0;
  for (size_t i = 0; i < values.size(); ++i)
    sum += static_cast<double>(values[i]) * static_cast<double>(weights[i]);
  return sum;
}

std::string GradCheckResult::describe() const {
  std::ostringstream os;
  os.precision(4);
  os << "max rel error " << max_rel_error << " at [" << worst_index << "] (analytic "
     << analytic_at_worst << ", numeric " << numeric_at_worst << ") over " << checked
     << " elements";
  return os.str();
}

GradCheckResult check_gradient(const std::function<double(const std::vector<float>&)>& loss,
                               const std::vector<float>& x, const std::vector<float>& analytic,
                               const GradCheckOptions& options) {
  if (x.size() != analytic.size())
    throw std::invalid_argument("check_gradient: " + std::to_string(x.size()) + " inputs but " +
                                std::to_string(analytic.size()) + " gradient entries");
  double largest = 0;
  for (float g : analytic) largest = std::max(largest, std::fabs(static_cast<double>(g)));
  const double floor = std::max(options.floor * largest, 1e-12);
  const size_t n = x.size();
  const size_t stride = options.max_checks == 0 || n <= options.max_checks
                            ? 1
                            : (n + options.max_checks - 1) / options.max_checks;

  GradCheckResult result;
  std::vector<float> moved = x;
  for (size_t i = 0; i < n; i += stride) {
    const float plus = static_cast<float>(x[i] + options.eps);
    const float minus = static_cast<float>(x[i] - options.eps);
    moved[i] = plus;
    const double loss_plus = loss(moved);
    moved[i] = minus;
    const double loss_minus = loss(moved);
    moved[i] = x[i];
    // The step after rounding to fp32, not the nominal 2 * eps.
    const double step = static_cast<double>(plus) - static_cast<double>(minus);
    const double numeric = (loss_plus - loss_minus) / step;
    const double exact = analytic[i];
    const double scale = std::max({std::fabs(exact), std::fabs(numeric), floor});
    const double raw_error = std::fabs(exact - numeric) / scale;
    const double error = std::isnan(raw_error) ? INFINITY : raw_error;  // a NaN must fail a check
    if (error > result.max_rel_error || result.checked == 0) {
      result.max_rel_error = error;
      result.worst_index = i;
      result.analytic_at_worst = exact;
      result.numeric_at_worst = numeric;
    }
    ++result.checked;
  }
  return result;
}

}  // namespace nmt::test
