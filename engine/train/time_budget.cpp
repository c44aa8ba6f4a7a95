// ETA and max_time arithmetic (engine/train/time_budget.h).
#include "engine/train/time_budget.h"

#include <algorithm>

namespace nmt {

int64_t events_due(int64_t done, int64_t last, int64_t every, bool at_last) {
  if (last <= done) return 0;
  int64_t count = every > 0 ? last / every - done / every : 0;
  if (at_last && (every <= 0 || last % every != 0)) ++count;
  return count;
}

double eta_seconds(const TimeSpent& spent, const WorkLeft& left) {
  auto mean = [](double seconds, int64_t count) {
    return count > 0 ? seconds / static_cast<double>(count) : 0.0;
  };
  return static_cast<double>(left.steps) * mean(spent.step_seconds, spent.steps) +
         static_cast<double>(left.evals) * mean(spent.eval_seconds, spent.evals) +
         static_cast<double>(left.saves) * mean(spent.save_seconds, spent.saves);
}

double expected_save_seconds(const TimeSpent& spent, double first_save_guess) {
  if (spent.saves == 0) return std::max(1.0, first_save_guess);
  return std::max(1.0, 2.0 * spent.last_save_seconds);
}

bool must_stop_for_time(double elapsed, double max_seconds, double next_work_seconds,
                        double save_seconds) {
  if (max_seconds <= 0) return false;
  return elapsed + next_work_seconds + save_seconds >= max_seconds;
}

}  // namespace nmt
