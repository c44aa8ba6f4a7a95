// Shared test helpers: seeded random data that is the same on every platform, and a
// central-difference gradient checker for ops with an analytic backward.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace nmt::test {

// n values uniform in [lo, hi), from std::mt19937 bits (not std::uniform_real_distribution, whose
// algorithm differs between standard libraries), so a seed gives the same data everywhere.
std::vector<float> random_uniform(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f);
// The same values written into an existing vector (its size is kept).
void fill_uniform(std::vector<float>& values, uint32_t seed, float lo = -1.0f, float hi = 1.0f);

// sum_i weights[i] * values[i] in double: with random weights this turns an op's output into a
// scalar loss whose gradient with respect to that output is `weights`.
double weighted_sum(const std::vector<float>& values, const std::vector<float>& weights);

struct GradCheckOptions {
  // Central-difference step. The error of the estimate is ~eps^2 |f'''| (truncation) plus
  // ~(fp32 rounding of the loss) / eps; 1e-2..1e-3 balances the two for fp32 ops of O(1) values.
  double eps = 1e-2;
  // Entries are compared relative to max(|analytic|, |numeric|, floor * largest |analytic|), so
  // an entry much smaller than the gradient's scale is judged by its absolute error.
  double floor = 1e-2;
  // 0 checks every element; otherwise about this many, evenly spaced (for large inputs).
  size_t max_checks = 0;
};

struct GradCheckResult {
  double max_rel_error = 0;  // the worst relative error over the checked elements (inf for NaN)
  size_t worst_index = 0;
  double analytic_at_worst = 0;
  double numeric_at_worst = 0;
  size_t checked = 0;
  // "max rel error 3.1e-04 at [17] (analytic 0.51, numeric 0.5102) over 40 elements"
  std::string describe() const;
};

// Compares `analytic` (d loss / d x, evaluated at x) with central differences of `loss` around x.
// `loss` is called with copies of x where one element is moved by +-eps; the step actually taken
// is measured after fp32 rounding of the moved element.
GradCheckResult check_gradient(const std::function<double(const std::vector<float>&)>& loss,
                               const std::vector<float>& x, const std::vector<float>& analytic,
                               const GradCheckOptions& options = {});

}  // namespace nmt::test
