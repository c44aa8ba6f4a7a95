// The trainer's clock arithmetic, kept apart from the loop so it can be tested as plain numbers:
// the ETA of a run (steps, evaluations and checkpoint saves still to come, each at the mean
// duration of those done so far) and the train.max_time decision (stop now, with a checkpoint,
// while the save still fits before the wall-clock limit).
#pragma once

#include <cstdint>

namespace nmt {

// How many of the steps after `done` up to `last` are multiples of `every` (0 = none), plus the
// one at `last` itself when `at_last` and `last` is no multiple (the run's final evaluation or
// save).
int64_t events_due(int64_t done, int64_t last, int64_t every, bool at_last);

// What this process has spent so far (the steps alone, the evaluations, the saves) and how many.
struct TimeSpent {
  double step_seconds = 0;
  int64_t steps = 0;
  double eval_seconds = 0;
  int64_t evals = 0;
  double save_seconds = 0;
  int64_t saves = 0;
  double last_save_seconds = 0;
};

// What is left: steps, and the evaluations and saves due among them (events_due).
struct WorkLeft {
  int64_t steps = 0;
  int64_t evals = 0;
  int64_t saves = 0;
};

// Seconds to finish: each remaining step, evaluation and save at the mean of those done. A kind
// not seen yet (no evaluation before the first) adds nothing until one has been timed.
double eta_seconds(const TimeSpent& spent, const WorkLeft& left);

// The seconds a save is expected to take: the last save's duration times a safety factor of 2
// (file systems vary), at least 1 s; before the first save, `first_save_guess`.
double expected_save_seconds(const TimeSpent& spent, double first_save_guess);

// train.max_time: true when, after `elapsed` seconds of wall clock, one more step (and the
// evaluation due with it, `next_work_seconds`) and then a save (`save_seconds`) would end past
// `max_seconds`: the run must save and stop now. Never with max_seconds 0 (no limit).
bool must_stop_for_time(double elapsed, double max_seconds, double next_work_seconds,
                        double save_seconds);

}  // namespace nmt
