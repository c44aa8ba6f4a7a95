// Exact resume: a run stopped at a checkpoint and continued by a new run (--resume semantics)
// matches an uninterrupted run bit for bit — every loss line, every metrics.jsonl value, the final
// weights and Adam moments — on the synthetic task and on a real nmt-prep corpus. Resuming a
// changed model, an empty directory, or starting a new run over old checkpoints is refused.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "data/prep.h"
#include "engine/config/config.h"
#include "engine/train/trainer.h"
#include "test/checkpoint/python_oracle.h"
#include "test/support/catch.h"
#include "test/support/lib/scratch_dir.h"
#include "test/support/tiny_run_config.h"

namespace {

namespace fs = std::filesystem;
using nmt::test::error_of;
using nmt::test::read_lines;
using nmt::test::ScratchDir;
using nmt::test::write_lines;

constexpr int64_t kSteps = 40;
constexpr int64_t kLogEvery = 5;

// Tiny and fast, with dropout on (its masks must be the same after resume).
nmt::RunConfig tiny_config() {
  nmt::RunConfig c = nmt::test::tiny_reverse_config();
  c.data.synthetic_dev_pairs = 24;
  c.train.batch_tokens = 384;
  c.train.max_steps = kSteps;
  c.train.clip_norm = 1.0;
  c.lr_schedule.policy = nmt::LrPolicy::inverse_sqrt;
  c.lr_schedule.learning_rate = 3e-3;
  c.lr_schedule.warmup_steps = 10;
  c.log.every_steps = kLogEvery;
  c.log.tensorboard = false;
  c.eval.every_steps = 20;
  c.eval.samples = 0;
  c.checkpoint.every_steps = 20;
  c.checkpoint.keep = 0;
  return c;
}

void use_dirs(nmt::RunConfig& c, const std::string& root) {
  c.checkpoint.dir = root + "/ckpt";
  c.log.dir = root + "/log";
}

std::string train(const nmt::RunConfig& c, bool resume) {
  std::ostringstream log;
  nmt::TrainOptions options;
  options.resume = resume;
  nmt::run_training(c, log, options);
  return log.str();
}

// Step lines at regular log steps, cut before the timing: "step N | epoch E | ... | gnorm W".
std::vector<std::string> loss_lines(const std::string& log) {
  std::vector<std::string> out;
  std::regex re(
      R"((step (\d+) \| epoch \d+ \| loss [0-9.]+ \| acc [0-9.]+% \| lr [0-9.e+-]+ \| gnorm [0-9.]+))");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator();
       ++it)
    if (std::stoll((*it)[2]) % kLogEvery == 0) out.push_back((*it)[1]);
  return out;
}

std::vector<std::string> eval_lines(const std::string& log) {
  std::vector<std::string> out;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("eval step ")) out.push_back(line);
  return out;
}

// The deterministic fields of the regular "train" records, as full-precision JSON.
std::vector<std::string> train_values(const std::string& metrics_path) {
  std::ifstream in(metrics_path);
  REQUIRE(in);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (j["event"] != "train" || j["step"].get<int64_t>() % kLogEvery != 0) continue;
    out.push_back(
        nlohmann::json{j["step"], j["epoch"], j["loss"], j["acc"], j["lr"], j["grad_norm"]}.dump());
  }
  return out;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Trains kSteps straight, and stop_at steps then a new resumed run to kSteps; compares them.
void check_resume_is_exact(const nmt::RunConfig& base, int64_t stop_at) {
  ScratchDir dir("nmt-resume");
  nmt::RunConfig straight = base;
  use_dirs(straight, dir.path() + "/straight");
  std::string straight_log = train(straight, false);

  nmt::RunConfig first = base, second = base;
  use_dirs(first, dir.path() + "/split");
  use_dirs(second, dir.path() + "/split");
  first.train.max_steps = stop_at;
  std::string split_log = train(first, false);
  std::string resumed_log = train(second, true);
  INFO(straight_log + "\n---- split ----\n" + split_log + "\n---- resumed ----\n" + resumed_log);
  REQUIRE(resumed_log.find("resumed from " + second.checkpoint.dir + "/ckpt-" +
                           std::to_string(stop_at) + " at step " + std::to_string(stop_at)) !=
          std::string::npos);

  std::vector<std::string> expected = loss_lines(straight_log);
  REQUIRE(expected.size() == kSteps / kLogEvery);
  std::vector<std::string> got = loss_lines(split_log + resumed_log);
  CHECK(got == expected);
  CHECK(eval_lines(resumed_log).back() == eval_lines(straight_log).back());
  CHECK(train_values(second.log.dir + "/metrics.jsonl") ==
        train_values(straight.log.dir + "/metrics.jsonl"));

  std::string end = "/ckpt-" + std::to_string(kSteps);
  for (const char* file : {"/model.safetensors", "/optimizer.safetensors"}) {
    INFO(file);
    CHECK(file_bytes(straight.checkpoint.dir + end + file) ==
          file_bytes(second.checkpoint.dir + end + file));
  }
}

// An nmt-prep directory from the first 500 pairs of bible-en-es (vocabulary 300) with a small dev
// split, made once per test process.
const std::string& bible_prep_dir() {
  static ScratchDir dir("nmt-resume-prep");
  static std::string prep;
  if (!prep.empty()) return prep;
  const std::string corpus = nmt::test::shared_data_dir() + "/bible-en-es/";
  for (const char* side : {"en", "es"}) {
    write_lines(dir.path() + "/train." + side, read_lines(corpus + "train." + side, 0, 500));
    write_lines(dir.path() + "/dev." + side, read_lines(corpus + "dev." + side, 0, 16));
  }
  nmt::PrepOptions o;
  o.train_source = dir.path() + "/train.en";
  o.train_target = dir.path() + "/train.es";
  o.dev_source = dir.path() + "/dev.en";
  o.dev_target = dir.path() + "/dev.es";
  o.out_dir = dir.path() + "/prep";
  o.spm.vocab_size = 300;
  o.threads = 1;
  nmt::run_prep(o);
  prep = o.out_dir;
  return prep;
}

}  // namespace

TEST_CASE("synthetic data: stop at 20, resume to 40 = 40 straight, bit for bit",
          "[engine][resume]") {
  check_resume_is_exact(tiny_config(), 20);
}

TEST_CASE("nmt-prep corpus: resume between log lines is exact, BLEU evaluated",
          "[engine][resume]") {
  nmt::RunConfig c = tiny_config();
  c.data.train = c.data.dev = bible_prep_dir();
  c.data.max_src_len = c.data.max_tgt_len = 48;
  c.eval.max_sentences = 8;
  // Stopping at 23 (between log lines at 20 and 25) checks that the partial interval's sums are
  // carried in the checkpoint: the resumed run's line at 25 covers steps 21..25.
  check_resume_is_exact(c, 23);
}

TEST_CASE("resuming a changed model names every difference and leaves the run's files alone",
          "[engine][resume]") {
  ScratchDir dir("nmt-resume-shape");
  nmt::RunConfig c = tiny_config();
  use_dirs(c, dir.path());
  c.train.max_steps = 5;
  train(c, false);
  std::string metrics_before = file_bytes(c.log.dir + "/metrics.jsonl");

  nmt::RunConfig changed = c;
  changed.model.ffn_dim = 128;
  changed.train.max_steps = 10;
  std::string message = error_of([&] { train(changed, true); });
  INFO(message);
  CHECK(message.find("does not match the model") != std::string::npos);
  CHECK(message.find("encoder.layers.0.fc1.weight: saved [64, 32] vs model [128, 32]") !=
        std::string::npos);
  CHECK(message.find("model.ffn_dim: saved 64, now 128") != std::string::npos);
  CHECK(file_bytes(c.log.dir + "/metrics.jsonl") == metrics_before);
  CHECK(!fs::exists(c.checkpoint.dir + "/ckpt-10"));
}

TEST_CASE("--resume without a checkpoint, and a new run over old checkpoints, are refused",
          "[engine][resume]") {
  ScratchDir dir("nmt-resume-none");
  nmt::RunConfig c = tiny_config();
  use_dirs(c, dir.path());
  c.train.max_steps = 2;
  CHECK(error_of([&] { train(c, true); }) ==
        "no checkpoint in " + c.checkpoint.dir + " to resume from");
  train(c, false);
  std::string message = error_of([&] { train(c, false); });
  CHECK(message.find("already holds " + c.checkpoint.dir + "/ckpt-2: pass --resume") !=
        std::string::npos);
  // Resuming a run that already reached max_steps trains nothing and saves nothing new.
  std::string log = train(c, true);
  CHECK(log.find("nothing to train: step 2 already reaches train.max_steps 2") !=
        std::string::npos);
}

TEST_CASE("a tiny model trained on the real Bible corpus lowers its dev loss", "[engine][data]") {
  nmt::RunConfig c = tiny_config();
  c.data.train = c.data.dev = bible_prep_dir();
  c.data.max_src_len = c.data.max_tgt_len = 48;
  c.checkpoint.dir.clear();
  c.log.dir.clear();
  c.train.max_steps = 60;
  c.eval.every_steps = 10;
  c.eval.max_sentences = 8;
  std::vector<double> dev_losses;
  std::ostringstream log;
  nmt::run_training(c, log);
  std::istringstream lines(log.str());
  for (std::string line; std::getline(lines, line);)
    if (auto at = line.find("dev loss "); at != std::string::npos)
      dev_losses.push_back(std::stod(line.substr(at + 9)));
  INFO(log.str());
  REQUIRE(dev_losses.size() == 6);
  CHECK(dev_losses.back() < dev_losses.front() - 0.5);
}
