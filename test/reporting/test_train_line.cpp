// The per-interval log line and its metrics.jsonl record: every field a user reads, the fp16 loss
// scale only when it is dynamic, and skipped steps.
#include <string>

#include "engine/report/run_report.h"
#include "test/support/catch.h"

TEST_CASE("train line: means of the interval, loss scale when dynamic, skipped steps",
          "[cpu][reporting]") {
  nmt::IntervalStats s;
  s.loss = 300;
  s.tokens = 100;
  s.correct = 25;
  s.grad_norm = 3;
  s.steps = 3;
  s.skipped = 1;
  s.timed_steps = 3;
  s.timed_tokens = 100;
  s.step_seconds = 0.03;
  s.forward_backward_seconds = 0.024;
  s.optimizer_seconds = 0.006;
  nmt::TrainRecord r = nmt::make_train_record(40, 2, 1e-3, 12, s);
  std::string line = nmt::format_train_line(r);
  CHECK(line.find("step 40 | epoch 2 | loss 3.0000 | acc 25.00% | lr 1.000e-03 | gnorm 1.000 |") ==
        0);
  CHECK(line.find("10.0 ms/step (fwd+bwd 8.0, comm 0.0 exposed, opt 2.0)") != std::string::npos);
  CHECK(line.find("3333 tok/s") != std::string::npos);
  CHECK(line.find("1 skipped") != std::string::npos);
  CHECK(line.find("scale") == std::string::npos);

  r.loss_scale = 16384;
  r.dynamic_loss_scale = true;
  line = nmt::format_train_line(r);
  CHECK(line.find("gnorm 1.000 | scale 16384 |") != std::string::npos);
  nlohmann::json j = nmt::train_record_json(r);
  CHECK(j["loss_scale"].get<double>() == 16384);
  CHECK(j["skipped_steps"].get<int64_t>() == 1);
  CHECK(j["elapsed_s"].get<double>() >= 0);  // seconds since the process started
}
