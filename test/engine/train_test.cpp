// The training loop: same config and seed twice give identical loss lines; the loss goes down;
// metrics.jsonl, TensorBoard events and report.json hold what the log lines say; a stop signal
// ends the run with a checkpoint; an unwritable checkpoint.dir fails before training. The last
// cases run the nmt-train program itself (exit codes, real signals).
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/train/trainer.h"
#include "test/checkpoint/python_oracle.h"
#include "test/engine/train_program.h"
#include "test/support/catch.h"
#include "test/support/tiny_run_config.h"
#include "version/provenance.h"

namespace {

namespace fs = std::filesystem;
using nmt::test::error_of;
using nmt::test::ScratchDir;

nmt::RunConfig small_config() {
  nmt::RunConfig c = nmt::test::tiny_reverse_config();
  c.train.max_steps = 60;
  c.lr_schedule.policy = nmt::LrPolicy::inverse_sqrt;
  c.lr_schedule.learning_rate = 3e-3;
  c.lr_schedule.warmup_steps = 20;
  c.log.every_steps = 10;
  c.eval.every_steps = 60;
  return c;
}

// The deterministic part of each step line: "step N | epoch E | loss X | acc Y | lr Z | gnorm W".
std::vector<std::string> loss_lines(const std::string& log) {
  std::vector<std::string> out;
  std::regex re(
      R"((step \d+ \| epoch \d+ \| loss [0-9.]+ \| acc [0-9.]+% \| lr [0-9.e+-]+ \| gnorm [0-9.]+))");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator();
       ++it)
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

TEST_CASE("a different seed gives a different run, and training lowers the loss",
          "[engine][train]") {
  nmt::RunConfig c = small_config();
  std::ostringstream a, b;
  nmt::TrainSummary s = nmt::run_training(c, a);
  c.train.seed = 2;
  nmt::run_training(c, b);
  CHECK(loss_lines(a.str()) != loss_lines(b.str()));
  auto lines = loss_lines(a.str());
  REQUIRE(lines.size() == 6);
  double first = std::stod(lines.front().substr(lines.front().find("loss ") + 5));
  CHECK(s.last_loss < first - 0.3);
}

// The loss and accuracy of a loss line ("loss X | acc Y%").
std::string loss_and_acc(const std::string& line) {
  const size_t from = line.find("loss "), to = line.find(" | lr");
  return line.substr(from, to - from);
}

TEST_CASE("update_freq 2 counts every micro-batch's loss: the same batches give the same loss line",
          "[engine][train]") {
  // The learning rate too small to move a weight and no dropout: every batch sees the same model,
  // so 12 steps of two micro-batches and 24 steps of one read the same 24 batches and must log
  // the same token-weighted loss and accuracy (the trainer reads the last micro-batch's sums after
  // the update is enqueued, the others before the next one overwrites them).
  nmt::RunConfig c = small_config();
  c.lr_schedule.learning_rate = 1e-30;
  c.model.dropout = c.model.attention_dropout = c.model.relu_dropout = 0;
  c.eval.every_steps = 0;
  c.train.max_steps = c.log.every_steps = 24;
  std::ostringstream one, two;
  nmt::run_training(c, one);
  c.train.update_freq = 2;
  c.train.max_steps = c.log.every_steps = 12;
  nmt::run_training(c, two);
  const auto lines_one = loss_lines(one.str()), lines_two = loss_lines(two.str());
  INFO(one.str() << "\n" << two.str());
  REQUIRE(lines_one.size() == 1);
  REQUIRE(lines_two.size() == 1);
  CHECK(loss_and_acc(lines_two[0]) == loss_and_acc(lines_one[0]));
}

namespace {

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in);
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(in, line);) {
    INFO(line);
    nlohmann::json j = nlohmann::json::parse(line);  // throws (fails the test) when invalid
    REQUIRE(j.is_object());
    records.push_back(j);
  }
  return records;
}

std::vector<nlohmann::json> events(const std::vector<nlohmann::json>& records,
                                   const std::string& name) {
  std::vector<nlohmann::json> out;
  for (const nlohmann::json& r : records)
    if (r.value("event", "") == name) out.push_back(r);
  return out;
}

// 20 steps, a line every 5, evaluations at 10 and 20, logs (and TensorBoard) under `root`.
nmt::RunConfig logged_config(const std::string& root) {
  nmt::RunConfig c = small_config();
  c.train.max_steps = 20;
  c.log.every_steps = 5;
  c.eval.every_steps = 10;
  c.eval.samples = 0;
  c.log.dir = root + "/log";
  c.log.tensorboard = true;
  c.checkpoint.dir = root + "/ckpt";
  return c;
}

}  // namespace

TEST_CASE("metrics.jsonl: one JSON object per log interval with every field, eval events, report",
          "[engine][train][reporting]") {
  ScratchDir dir("nmt-train-metrics");
  nmt::RunConfig c = logged_config(dir.path());
  std::ostringstream log;
  nmt::TrainOptions options;
  options.command_line = {"nmt-train", "--config", "run.json"};
  nmt::run_training(c, log, options);
  INFO(log.str());
  std::vector<nlohmann::json> records = read_jsonl(c.log.dir + "/metrics.jsonl");
  REQUIRE(!records.empty());
  CHECK(records.front()["event"] == "start");
  // Provenance: what built the run, how it was started, with what config.
  const nlohmann::json& start = records.front();
  CHECK(start["provenance"] == nmt::to_json(nmt::provenance()));
  CHECK(start["command_line"] == nlohmann::json(options.command_line));
  CHECK(start["config"]["train"]["max_steps"] == 20);
  CHECK(records.back()["event"] == "end");

  std::vector<nlohmann::json> train = events(records, "train");
  REQUIRE(train.size() == 4);
  for (size_t i = 0; i < train.size(); ++i) {
    INFO(train[i].dump());
    CHECK(train[i]["step"] == 5 * static_cast<int64_t>(i + 1));
    for (const char* key :
         {"epoch", "loss", "acc", "lr", "grad_norm", "ms_per_step", "tokens_per_s", "fwd_bwd_ms",
          "optimizer_ms", "exposed_comm_ms", "eta_s"})
      CHECK(train[i].contains(key));
    CHECK(train[i]["loss"].get<double>() > 0);
    CHECK(train[i]["tokens_per_s"].get<double>() > 0);
    CHECK(train[i]["exposed_comm_ms"] == 0.0);
    // The split adds up to the step (the rest is the timer's own overhead).
    double parts = train[i]["fwd_bwd_ms"].get<double>() + train[i]["optimizer_ms"].get<double>();
    CHECK(parts <= train[i]["ms_per_step"].get<double>() + 1e-6);
    CHECK(parts >= 0.9 * train[i]["ms_per_step"].get<double>());
  }
  std::vector<nlohmann::json> evals = events(records, "eval");
  REQUIRE(evals.size() == 2);
  CHECK(evals[1]["step"] == 20);
  CHECK(evals[1].contains("loss"));
  CHECK(evals[1].contains("greedy_token_accuracy"));
  CHECK(!evals[1].contains("bleu"));                 // synthetic data has no text to score
  CHECK(events(records, "checkpoint").size() == 1);  // checkpoint.every_steps 0: at the end only

  std::ifstream report_file(c.log.dir + "/report.json");
  REQUIRE(report_file);
  nlohmann::json report = nlohmann::json::parse(report_file);
  INFO(report.dump(2));
  CHECK(report["steps"] == 20);
  CHECK(report["last_step"] == 20);
  CHECK(report["stop_reason"] == "max_steps");
  CHECK(report["parameters"].get<int64_t>() > 0);
  CHECK(report["peak_memory_bytes"].get<int64_t>() > 0);
  CHECK(report["tokens_per_s"].get<double>() > 0);
  CHECK(report["mean_step_ms"].get<double>() > 0);
  CHECK(report["best_metric"]["name"] == "greedy_token_accuracy");
  CHECK(report["best_metric"]["value"] == evals[1]["greedy_token_accuracy"]);
  CHECK(report["best_checkpoint"] == c.checkpoint.dir + "/ckpt-20");
  CHECK(report["last_checkpoint_bytes"].get<int64_t>() > 0);
  CHECK(report["provenance"] == start["provenance"]);
  CHECK(report["command_line"] == start["command_line"]);
  CHECK(report["config"] == start["config"]);
  CHECK(log.str().find("run report: steps 1..20") != std::string::npos);
}

TEST_CASE("TensorBoard reads the run's scalars, sample translations and config as hparams",
          "[engine][train][reporting][python]") {
  ScratchDir dir("nmt-train-tb");
  nmt::RunConfig c = logged_config(dir.path());
  c.eval.samples = 2;
  std::ostringstream log;
  nmt::run_training(c, log);
  std::vector<nlohmann::json> train = events(read_jsonl(c.log.dir + "/metrics.jsonl"), "train");
  nlohmann::json seen =
      nmt::test::run_python_oracle("test/reporting/read_events.py", c.log.dir, dir.path());
  INFO(seen.dump());
  const nlohmann::json& scalars = seen["scalars"];
  for (const char* tag : {"train/loss", "train/lr", "train/tokens_per_s", "train/step_ms"}) {
    INFO(tag);
    REQUIRE(scalars.contains(tag));
    CHECK(scalars[tag].size() == 4);
  }
  for (size_t i = 0; i < 4; ++i) {
    CHECK(scalars["train/loss"][i][0] == train[i]["step"]);
    CHECK(scalars["train/loss"][i][1].get<double>() ==
          static_cast<double>(static_cast<float>(train[i]["loss"].get<double>())));
  }
  REQUIRE(scalars.contains("eval/loss"));
  REQUIRE(scalars.contains("eval/greedy_token_accuracy"));
  CHECK(scalars["eval/greedy_token_accuracy"].size() == 2);
  CHECK(scalars["eval/greedy_token_accuracy"][1][0] == 20);

  // Each evaluation's samples as one Markdown table: a header, a rule and a row per sample.
  const nlohmann::json& texts = seen["texts"]["eval/samples"];
  REQUIRE(texts.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(texts[i][0] == 10 * static_cast<int64_t>(i + 1));
    std::string table = texts[i][1];
    CHECK(table.starts_with("| source | reference | prediction |\n|---|---|---|\n"));
    CHECK(std::count(table.begin(), table.end(), '\n') == 4);
  }
  // The resolved config as hyperparameters; the last dev score and loss as the session's metrics.
  const nlohmann::json& hparams = seen["hparams"]["session_start_info"]["hparams"];
  CHECK(hparams["model.d_model"] == c.model.d_model);
  CHECK(hparams["train.batch_tokens"] == c.train.batch_tokens);
  CHECK(hparams["lr_schedule.learning_rate"] == c.lr_schedule.learning_rate);
  CHECK(hparams["data.train"] == c.data.train);
  CHECK(hparams["log.tensorboard"] == true);
  const nlohmann::json& sessions = seen["dashboard"]["sessions"];
  REQUIRE(sessions.size() == 1);
  CHECK(sessions[0]["metrics"]["eval/greedy_token_accuracy"] ==
        scalars["eval/greedy_token_accuracy"][1][1]);
  CHECK(sessions[0]["metrics"]["eval/loss"] == scalars["eval/loss"][1][1]);
}

TEST_CASE("a checkpoint.dir under a regular file fails with its path, before any training",
          "[engine][train]") {
  ScratchDir dir("nmt-train-unwritable");
  std::ofstream(dir.path() + "/file") << "not a directory\n";
  nmt::RunConfig c = small_config();
  c.checkpoint.dir = dir.path() + "/file/ckpt";
  c.log.dir = dir.path() + "/log";
  std::ostringstream log;
  std::string message = error_of([&] { nmt::run_training(c, log); });
  CHECK(message == "checkpoint.dir: cannot create " + c.checkpoint.dir + ": Not a directory");
  CHECK(log.str().empty());
  CHECK(!fs::exists(c.log.dir));
}

TEST_CASE("SIGTERM: the handler sets the flag; the step finishes, a checkpoint is saved",
          "[engine][train]") {
  ScratchDir dir("nmt-train-sigterm");
  std::atomic<int>& stop = nmt::install_stop_signal_handlers();
  stop = 0;
  std::raise(SIGTERM);
  std::signal(SIGINT, SIG_DFL);  // give Ctrl-C back to the test runner
  REQUIRE(stop.load() == SIGTERM);
  nmt::RunConfig c = small_config();
  c.checkpoint.dir = dir.path() + "/ckpt";
  nmt::TrainOptions options;
  options.stop_signal = &stop;
  std::ostringstream log;
  nmt::TrainSummary s = nmt::run_training(c, log, options);
  stop = 0;
  INFO(log.str());
  CHECK(s.steps == 1);
  CHECK(s.stop_signal == SIGTERM);
  CHECK(s.last_checkpoint == c.checkpoint.dir + "/ckpt-1");
  CHECK(fs::exists(c.checkpoint.dir + "/ckpt-1/model.safetensors"));
  CHECK(log.str().find("step 1 | epoch 0 | loss") != std::string::npos);
  CHECK(log.str().find("stopped by SIGTERM after step 1: saved " + c.checkpoint.dir +
                       "/ckpt-1; continue with --resume") != std::string::npos);
}

TEST_CASE("SIGTERM twice: the handler stays installed and keeps the first signal",
          "[engine][train]") {
  std::atomic<int>& stop = nmt::install_stop_signal_handlers();
  stop = 0;
  std::raise(SIGTERM);
  std::raise(SIGTERM);  // installed with SA_RESETHAND, this one ended the process (issue 15)
  std::signal(SIGINT, SIG_DFL);  // give Ctrl-C back to the test runner
  CHECK(stop.load() == SIGTERM);
  stop = 0;
}

TEST_CASE("eval.early_stop_patience stops after that many evaluations without improvement",
          "[engine][train]") {
  nmt::RunConfig c = small_config();
  // A learning rate too small to change any greedy decision: the metric never improves.
  c.lr_schedule.policy = nmt::LrPolicy::constant;
  c.lr_schedule.learning_rate = 1e-12;
  c.train.max_steps = 100;
  c.eval.every_steps = 5;
  c.eval.samples = 0;
  c.eval.early_stop_patience = 2;
  std::ostringstream log;
  nmt::TrainSummary s = nmt::run_training(c, log);
  INFO(log.str());
  CHECK(s.early_stopped);
  CHECK(s.steps == 15);
  CHECK(
      log.str().find("early stop: no better greedy_token_accuracy in 2 evaluations since step 5") !=
      std::string::npos);
}

#ifdef NMT_TRAIN_BINARY
using nmt::test::ProgramResult;
using nmt::test::run_program;
using nmt::test::write_config;

TEST_CASE("nmt-train: SIGINT saves and exits 130, SIGTERM exits 0, --resume continues",
          "[engine][train][program]") {
  ScratchDir dir("nmt-train-program");
  nmt::RunConfig c = small_config();
  c.train.max_steps = 100000;
  c.log.every_steps = 5;
  c.eval.every_steps = 0;
  c.checkpoint.dir = dir.path() + "/ckpt";
  std::string config = write_config(dir.path() + "/run.json", c);

  ProgramResult interrupted = run_program({"--config", config}, SIGINT, "step 5 |");
  INFO(interrupted.output);
  CHECK(interrupted.exit_code == 130);
  CHECK(interrupted.output.find("stopped by SIGINT after step ") != std::string::npos);

  ProgramResult terminated = run_program({"--config", config, "--resume"}, SIGTERM, "step 10 |");
  INFO(terminated.output);
  CHECK(terminated.exit_code == 0);
  CHECK(terminated.output.find("resumed from " + c.checkpoint.dir + "/ckpt-") != std::string::npos);
  CHECK(terminated.output.find("stopped by SIGTERM after step ") != std::string::npos);

  std::smatch stopped;
  REQUIRE(std::regex_search(terminated.output, stopped, std::regex("after step (\\d+)")));
  std::string end = std::to_string(std::stoll(stopped[1]) + 2);
  ProgramResult finished =
      run_program({"--config", config, "--resume", "--set", "train.max_steps=" + end});
  INFO(finished.output);
  CHECK(finished.exit_code == 0);
  CHECK(finished.output.find("done: " + end + " steps") != std::string::npos);
}

TEST_CASE(
    "nmt-train: an unwritable checkpoint.dir and a changed model exit non-zero with one "
    "message",
    "[engine][train][program]") {
  ScratchDir dir("nmt-train-program-errors");
  std::ofstream(dir.path() + "/file") << "x\n";
  nmt::RunConfig c = small_config();
  c.train.max_steps = 3;
  c.checkpoint.dir = dir.path() + "/file/ckpt";
  ProgramResult bad_dir = run_program({"--config", write_config(dir.path() + "/a.json", c)});
  CHECK(bad_dir.exit_code == 1);
  CHECK(bad_dir.output == "nmt-train: error: checkpoint.dir: cannot create " + c.checkpoint.dir +
                              ": Not a directory\n");

  c.checkpoint.dir = dir.path() + "/ckpt";
  std::string config = write_config(dir.path() + "/b.json", c);
  REQUIRE(run_program({"--config", config}).exit_code == 0);
  ProgramResult changed =
      run_program({"--config", config, "--resume", "--set", "model.d_model=64"});
  INFO(changed.output);
  CHECK(changed.exit_code == 1);
  CHECK(changed.output.find("nmt-train: error: ") != std::string::npos);
  CHECK(changed.output.find("model.d_model: saved 32, now 64") != std::string::npos);
}
#endif
