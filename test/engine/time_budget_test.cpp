// The trainer's clock arithmetic as numbers (events due, ETA with evaluations and saves, the
// max_time decision), train.max_time's spellings, and a tiny CPU run that stops before its
// wall-clock limit with a checkpoint and resumes from it.
#include <filesystem>
#include <sstream>
#include <string>

#include "engine/config/config.h"
#include "engine/train/time_budget.h"
#include "engine/train/trainer.h"
#include "test/support/catch.h"
#include "test/support/lib/scratch_dir.h"
#include "test/support/tiny_run_config.h"

TEST_CASE("events_due counts multiples after `done` up to `last`, and the final one",
          "[engine][time]") {
  CHECK(nmt::events_due(0, 1000, 100, false) == 10);
  CHECK(nmt::events_due(0, 1000, 100, true) == 10);  // 1000 is a multiple: not twice
  CHECK(nmt::events_due(0, 1050, 100, true) == 11);  // ... and the run's final one
  CHECK(nmt::events_due(250, 1000, 100, false) == 8);
  CHECK(nmt::events_due(299, 1000, 100, false) == 8);  // 300 still to come
  CHECK(nmt::events_due(0, 1000, 0, true) == 1);       // only the final save
  CHECK(nmt::events_due(0, 1000, 0, false) == 0);
  CHECK(nmt::events_due(1000, 1000, 100, true) == 0);
}

TEST_CASE("the ETA adds the evaluations and saves still due at their mean durations",
          "[engine][time]") {
  nmt::TimeSpent spent;
  spent.step_seconds = 20;  // 100 steps of 0.2 s
  spent.steps = 100;
  nmt::WorkLeft left{900, 9, 10};
  CHECK(nmt::eta_seconds(spent, left) == Approx(180.0));  // no evaluation or save timed yet
  spent.eval_seconds = 30;  // two evaluations of 15 s
  spent.evals = 2;
  spent.save_seconds = 4;  // one save of 4 s
  spent.saves = 1;
  CHECK(nmt::eta_seconds(spent, left) == Approx(180.0 + 9 * 15.0 + 10 * 4.0));
  CHECK(nmt::eta_seconds(spent, {0, 0, 0}) == 0);
}

TEST_CASE("max_time: stop while one more step, its evaluation and a save still fit",
          "[engine][time]") {
  nmt::TimeSpent spent;
  CHECK(nmt::expected_save_seconds(spent, 0.2) == 1.0);  // at least 1 s
  CHECK(nmt::expected_save_seconds(spent, 7.5) == 7.5);  // the size-based guess before any save
  spent.saves = 1;
  spent.last_save_seconds = 3;
  CHECK(nmt::expected_save_seconds(spent, 7.5) == 6.0);  // twice the last one
  CHECK_FALSE(nmt::must_stop_for_time(100, 0, 10, 6));   // no limit
  CHECK_FALSE(nmt::must_stop_for_time(100, 120, 10, 6));
  CHECK(nmt::must_stop_for_time(104, 120, 10, 6));
  CHECK(nmt::must_stop_for_time(130, 120, 0, 0));
}

TEST_CASE("train.max_time spellings: seconds, H:MM:SS, M:SS, D-HH:MM:SS", "[engine][time]") {
  CHECK(nmt::parse_max_time("5400") == 5400);
  CHECK(nmt::parse_max_time("1:30:00") == 5400);
  CHECK(nmt::parse_max_time("90:00") == 5400);
  CHECK(nmt::parse_max_time("2-00:00:00") == 172800);
  CHECK(nmt::parse_max_time("1-12:00:00") == 129600);
  for (const char* bad : {"", "0", "1:75", "1h", "-5", "1:2:3:4", "2-10", "1:-1", "1.5", ":30"}) {
    INFO(bad);
    CHECK_FALSE(nmt::parse_max_time(bad).has_value());
  }
  nmt::RunConfig c = nmt::test::tiny_reverse_config();
  c.train.max_time = "1h";
  try {
    nmt::validate_run_config(c);
    FAIL("1h was accepted");
  } catch (const nmt::ConfigError& e) {
    CHECK(std::string(e.what()).find("train.max_time = \"1h\" is not a time limit") !=
          std::string::npos);
  }
}

TEST_CASE("max_time: a tiny CPU run stops before its limit with a checkpoint, exit-clean",
          "[engine][time][train]") {
  nmt::test::ScratchDir dir("nmt-train-max-time");
  nmt::RunConfig c = nmt::test::tiny_reverse_config();
  c.train.max_steps = 1000000;  // far more than fits in the limit
  c.train.max_time = "3";
  c.log.every_steps = 1000000;
  c.checkpoint.dir = dir.path() + "/ckpt";
  std::ostringstream log;
  nmt::TrainSummary s = nmt::run_training(c, log);
  INFO(log.str());
  CHECK(s.time_limit_reached);
  CHECK(s.stop_signal == 0);
  CHECK(s.wall_seconds < 3.0);
  CHECK(s.steps > 0);
  CHECK(s.last_checkpoint == c.checkpoint.dir + "/ckpt-" + std::to_string(s.steps));
  CHECK(std::filesystem::exists(s.last_checkpoint + "/model.safetensors"));
  CHECK(log.str().find("first step done in ") != std::string::npos);
  CHECK(log.str().find("stopped by train.max_time 3 after step " + std::to_string(s.steps)) !=
        std::string::npos);
  CHECK(log.str().find("continue with --resume") != std::string::npos);

  // The next job continues from that checkpoint, within its own limit.
  nmt::TrainOptions resume;
  resume.resume = true;
  std::ostringstream again;
  nmt::TrainSummary next = nmt::run_training(c, again, resume);
  CHECK(next.first_step == s.steps);
  CHECK(next.steps > s.steps);
  CHECK(next.time_limit_reached);
}
