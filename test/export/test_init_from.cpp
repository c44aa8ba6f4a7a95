// Fine-tuning from a checkpoint's weights (nmt-train --init-from): the weights are the checkpoint's
// (exactly: a copy through nmt-average trains to the same bits), the step counter, optimizer and
// data start fresh, a model of another shape is refused naming the mismatching tensor, and
// --init-from with --resume is refused.
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_average.h"
#include "engine/config/config.h"
#include "engine/train/trainer.h"
#include "test/support/catch.h"
#include "test/support/lib/scratch_dir.h"
#include "test/support/tiny_run_config.h"

namespace {

namespace fs = std::filesystem;
using nmt::test::error_of;
using nmt::test::ScratchDir;

nmt::RunConfig tiny_config(const std::string& root, int64_t steps) {
  nmt::RunConfig c = nmt::test::tiny_reverse_config();
  c.train.max_steps = steps;
  c.lr_schedule.policy = nmt::LrPolicy::inverse_sqrt;
  c.lr_schedule.learning_rate = 3e-3;
  c.lr_schedule.warmup_steps = 4;
  c.log.every_steps = 1;
  c.log.tensorboard = false;
  c.eval.every_steps = 0;
  c.checkpoint.dir = root + "/ckpt";
  c.checkpoint.every_steps = 0;
  return c;
}

struct Run {
  std::string log;
  nmt::TrainSummary summary;
  std::vector<float> weights;
};

Run train(const nmt::RunConfig& c, const std::string& init_from = "", bool resume = false) {
  std::ostringstream log;
  Run run;
  nmt::TrainOptions options;
  options.init_from = init_from;
  options.resume = resume;
  options.final_parameters = &run.weights;
  run.summary = nmt::run_training(c, log, options);
  run.log = log.str();
  return run;
}

// "loss 2.5802" of the "step N |" line.
std::string loss_at(const std::string& log, int64_t step) {
  std::string marker = "step " + std::to_string(step) + " | ";
  size_t at = log.find(marker);
  REQUIRE(at != std::string::npos);
  size_t loss = log.find("loss ", at);
  return log.substr(loss, log.find(" |", loss) - loss);
}

}  // namespace

TEST_CASE("--init-from loads the weights only: fresh step, optimizer and data", "[init_from]") {
  ScratchDir dir("nmt-init-from");
  Run base = train(tiny_config(dir.file("base"), 30));
  std::string ckpt = base.summary.last_checkpoint;
  REQUIRE(ckpt == dir.file("base") + "/ckpt/ckpt-30");

  Run tuned = train(tiny_config(dir.file("tuned"), 3), ckpt);
  CHECK(tuned.log.find("initialized from " + ckpt + " (step 30): weights only") !=
        std::string::npos);
  CHECK(tuned.summary.first_step == 0);  // the step counter starts over
  CHECK(tuned.summary.steps == 3);
  CHECK(fs::exists(dir.file("tuned") + "/ckpt/ckpt-3"));
  // The first step runs the trained weights on the first batch of a fresh data stream: its loss
  // is far below that of the same step from the initial weights.
  Run fresh = train(tiny_config(dir.file("fresh"), 3));
  CHECK(loss_at(tuned.log, 1) != loss_at(fresh.log, 1));
  CHECK(std::stod(loss_at(tuned.log, 1).substr(5)) < std::stod(loss_at(fresh.log, 1).substr(5)));

  SECTION("the weights are loaded exactly: a bit-identical copy trains to the same bits") {
    nmt::average_checkpoints({ckpt}, dir.file("copy"));
    Run again = train(tiny_config(dir.file("again"), 3), dir.file("copy"));
    CHECK(again.weights == tuned.weights);
    CHECK(loss_at(again.log, 3) == loss_at(tuned.log, 3));
  }
  SECTION("another model shape is refused naming the tensor and the config key") {
    nmt::RunConfig wide = tiny_config(dir.file("wide"), 3);
    wide.model.ffn_dim = 128;
    std::string message = error_of([&] { train(wide, ckpt); });
    CHECK(message.find("encoder.layers.0.fc1.weight: saved [64, 32] vs model [128, 32]") !=
          std::string::npos);
    CHECK(message.find("model.ffn_dim: saved 64, now 128") != std::string::npos);
  }
  SECTION("--init-from with --resume, or a missing checkpoint, is refused") {
    CHECK(error_of([&] {
            train(tiny_config(dir.file("base"), 40), ckpt, true);
          }).find("cannot be combined with --resume") != std::string::npos);
    CHECK(error_of([&] { train(tiny_config(dir.file("x"), 3), dir.file("nope")); }).find("nope") !=
          std::string::npos);
  }
}
