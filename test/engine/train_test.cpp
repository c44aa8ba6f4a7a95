// The training loop: same config and seed twice give identical loss lines; the loss goes down.
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/trainer.h"
#include "test/support/catch.h"

namespace {

nmt::RunConfig small_config() {
  nmt::RunConfig c;
  c.data.train = "synthetic:reverse";
  c.data.synthetic_train_pairs = 2000;
  c.data.synthetic_dev_pairs = 40;
  c.data.synthetic_max_len = 8;
  c.model.encoder_layers = c.model.decoder_layers = 1;
  c.model.d_model = 32;
  c.model.num_heads = 4;
  c.model.ffn_dim = 64;
  c.train.device = nmt::Device::cpu;
  c.train.precision = nmt::DType::f32;
  c.train.batch_tokens = 512;
  c.train.max_steps = 60;
  c.lr_schedule.policy = nmt::LrPolicy::inverse_sqrt;
  c.lr_schedule.learning_rate = 3e-3;
  c.lr_schedule.warmup_steps = 20;
  c.log.every_steps = 10;
  c.eval.every_steps = 60;
  return c;
}

// The deterministic part of each step line: "step N | loss X | acc Y | lr Z | gnorm W".
std::vector<std::string> loss_lines(const std::string& log) {
  std::vector<std::string> out;
  std::regex re(R"((step \d+ \| loss [0-9.]+ \| acc [0-9.]+% \| lr [0-9.e+-]+ \| gnorm [0-9.]+))");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1]);
  return out;
}

}  // namespace

TEST_CASE("same config and seed twice give identical loss lines, bit for bit", "[engine][train]") {
  std::ostringstream a, b;
  nmt::run_training(small_config(), a);
  nmt::run_training(small_config(), b);
  auto la = loss_lines(a.str()), lb = loss_lines(b.str());
  REQUIRE(la.size() == 6);
  CHECK(la == lb);
  INFO(a.str());
  CHECK(a.str().find("eval step 60") != std::string::npos);
}

TEST_CASE("a different seed gives a different run, and training lowers the loss", "[engine][train]") {
  nmt::RunConfig c = small_config();
  std::ostringstream a, b;
  nmt::TrainSummary s = nmt::run_training(c, a);
  c.train.seed = 2;
  nmt::run_training(c, b);
  CHECK(loss_lines(a.str()) != loss_lines(b.str()));
  auto lines = loss_lines(a.str());
  double first = std::stod(lines.front().substr(lines.front().find("loss ") + 5));
  CHECK(s.last_loss < first - 0.3);
}
