// Every kind of config error gives one message that names the file or --set, the key path, the
// value and what is allowed (or the closest known key).
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/config/config_schema.h"
#include "test/config/config_test_util.h"

namespace nmt {
namespace {

using test::config_error_of;
using test::contains;
using test::ScratchFile;

// The message of loading `text` as a config file (plus overrides); it must name the file.
std::string file_error(const std::string& text, const std::vector<std::string>& sets = {}) {
  ScratchFile file(text);
  const std::string message = config_error_of([&] { load_run_config(file.path(), sets); });
  INFO(message);
  CHECK(contains(message, file.path()));
  return message;
}

// The message of one --set applied to the defaults; it must quote the --set.
std::string override_error(const std::string& assignment) {
  RunConfig cfg;
  const std::string message = config_error_of([&] { apply_config_override(cfg, assignment); });
  INFO(message);
  CHECK(contains(message, "--set " + assignment));
  return message;
}

// Loads the defaults with `sets` applied to a synthetic-data CPU base and returns the error.
std::string rule_error(std::vector<std::string> sets) {
  return file_error(R"({"train": {"device": "cpu", "precision": "fp32"}})", sets);
}

TEST_CASE("unknown keys and sections name the path and the closest key", "[config]") {
  std::string message = file_error(R"({"model": {"d_modle": 512}})");
  INFO(message);
  CHECK(contains(message, "unknown key model.d_modle"));
  CHECK(contains(message, "did you mean model.d_model?"));

  message = file_error(R"({"modle": {"d_model": 512}})");
  CHECK(contains(message, "unknown section modle"));
  CHECK(contains(message, "did you mean model?"));

  // A key written without its section.
  message = file_error(R"({"d_model": 512})");
  CHECK(contains(message, "did you mean model.d_model?"));

  // The right name in the wrong section.
  message = file_error(R"({"train": {"dropout": 0.1}})");
  CHECK(contains(message, "unknown key train.dropout"));
  CHECK(contains(message, "did you mean model.dropout?"));

  // Nothing close: list what the section has.
  message = file_error(R"({"model": {"zzzzzzzzz": 1}})");
  CHECK(contains(message, "unknown key model.zzzzzzzzz"));
  CHECK(contains(message, "keys of model: encoder_layers, decoder_layers, d_model"));

  message = file_error(R"({"qqqqqqqq": {}})");
  CHECK(contains(message, "sections: model, data, train, optimizer, lr_schedule, eval"));

  message = override_error("train.max_step=5");
  CHECK(contains(message, "unknown key train.max_step"));
  CHECK(contains(message, "did you mean train.max_steps?"));

  message = override_error("trian.max_steps=5");
  CHECK(contains(message, "did you mean train.max_steps?"));

  message = override_error("d_model=5");
  CHECK(contains(message, "did you mean model.d_model?"));
}

TEST_CASE("wrong JSON types name the key, the value and the allowed values", "[config]") {
  std::string message = file_error(R"({"model": {"d_model": "512"}})");
  INFO(message);
  CHECK(contains(message, "model.d_model = \"512\" has the wrong type"));
  CHECK(contains(message, "expected an integer in [8, 65536]"));

  message = file_error(R"({"model": {"d_model": 512.5}})");
  CHECK(contains(message, "model.d_model = 512.5 is not an integer"));

  message = file_error(R"({"model": {"shared_embeddings": 1}})");
  CHECK(
      contains(message, "model.shared_embeddings = 1 has the wrong type: expected true or false"));

  message = file_error(R"({"model": {"dropout": "0.1"}})");
  CHECK(
      contains(message, "model.dropout = \"0.1\" has the wrong type: expected a number in [0, 1)"));

  message = file_error(R"({"data": {"train": 5}})");
  CHECK(contains(message, "data.train = 5 has the wrong type: expected a string"));

  message = file_error(R"({"train": {"device": null}})");
  CHECK(contains(message, "train.device = null has the wrong type"));

  message = file_error(R"({"model": 6})");
  CHECK(contains(message, "section model must be a JSON object of keys, got 6"));

  message = file_error(R"([1, 2])");
  CHECK(contains(message, "the top level must be a JSON object"));
}

TEST_CASE("out-of-range values name the key, the value and the range", "[config]") {
  std::string message = file_error(R"({"model": {"dropout": 1.0}})");
  INFO(message);
  CHECK(contains(message, "model.dropout = 1.0 is out of range: expected a number in [0, 1)"));

  message = file_error(R"({"model": {"encoder_layers": 0}})");
  CHECK(contains(message,
                 "model.encoder_layers = 0 is out of range: expected an integer in [1, 64]"));

  message = file_error(R"({"model": {"layernorm_eps": 0}})");
  CHECK(
      contains(message, "model.layernorm_eps = 0 is out of range: expected a number in (0, 0.1]"));

  message = file_error(R"({"train": {"clip_norm": -1}})");
  CHECK(contains(message, "train.clip_norm = -1 is out of range: expected a number >= 0"));

  message = file_error(R"({"train": {"max_steps": 18446744073709551615}})");
  CHECK(contains(message, "train.max_steps = 18446744073709551615 is out of range"));

  message = file_error(R"({"train": {"device": "gpu"}})");
  CHECK(contains(message,
                 "train.device = \"gpu\" is not allowed: expected one of \"auto\", \"cpu\", "
                 "\"cuda\""));

  message = file_error(R"({"lr_schedule": {"policy": "noam"}})");
  CHECK(contains(message, "one of \"transformer_policy\", \"inverse_sqrt\", \"constant\""));

  // A RunConfig filled in code is checked the same way.
  RunConfig cfg;
  cfg.model.attention_dropout = 2.0;
  message = config_error_of([&] { validate_run_config(cfg, "test config"); });
  CHECK(contains(message, "test config: model.attention_dropout = 2.0 is out of range"));
}

TEST_CASE("--set values are parsed with the key's type", "[config]") {
  std::string message = override_error("model.d_model=abc");
  INFO(message);
  CHECK(contains(message,
                 "model.d_model = abc is not an integer: expected an integer in [8, 65536]"));

  message = override_error("model.d_model=5");
  CHECK(contains(message, "model.d_model = 5 is out of range"));

  message = override_error("model.d_model=99999999999999999999");
  CHECK(contains(message, "is out of range"));

  message = override_error("model.dropout=lots");
  CHECK(contains(message, "model.dropout = lots is not a number"));

  message = override_error("model.dropout=inf");
  CHECK(contains(message, "model.dropout = inf is out of range"));

  message = override_error("model.shared_embeddings=yes");
  CHECK(contains(message, "model.shared_embeddings = yes is not a bool: expected true or false"));

  message = override_error("model.norm=middle");
  CHECK(contains(message,
                 "model.norm = \"middle\" is not allowed: expected one of \"post\", \"pre\""));

  message = override_error("model.d_model");
  CHECK(contains(message, "expected section.key=value"));

  message = override_error("model.d_model=");
  CHECK(contains(message, "is not an integer"));

  RunConfig cfg;
  apply_config_override(cfg, "model.shared_embeddings=0");
  apply_config_override(cfg, "train.seed=1e3");
  apply_config_override(cfg, "eval.alpha=1");
  CHECK_FALSE(cfg.model.shared_embeddings);
  CHECK(cfg.train.seed == 1000);
  CHECK(cfg.eval.alpha == 1.0);
}

TEST_CASE("invalid JSON names the file, line and column", "[config]") {
  // The trailing comma: the parser fails on the '}' of line 4, column 3.
  std::string message = file_error("{\n  \"model\": {\n    \"d_model\": 512,\n  }\n}\n");
  INFO(message);
  CHECK(contains(message, "line 4, column 3: invalid JSON"));
  CHECK(contains(message, "expected string literal"));

  message = file_error("{\"model\": {\"d_model\": 51x}}");
  CHECK(contains(message, "line 1, column 25: invalid JSON"));

  message = file_error("");
  CHECK(contains(message, "line 1, column 1: invalid JSON"));

  message = file_error(R"({"model": {"d_model": 256, "d_model": 512}})");
  CHECK(contains(message, "duplicate key model.d_model"));
}

TEST_CASE("a missing config file is named", "[config]") {
  const std::string message =
      config_error_of([] { load_run_config("configs/no-such-config.json", {}); });
  CHECK(contains(message, "config file not found: configs/no-such-config.json"));
  CHECK(contains(config_error_of([] { load_run_config("configs", {}); }), "is a directory"));
}

TEST_CASE("cross-key rules", "[config]") {
  std::string message = rule_error({"model.d_model=500"});
  INFO(message);
  CHECK(contains(message, "with --set overrides"));
  CHECK(contains(message, "model.d_model (500) must be divisible by model.num_heads (8)"));

  message = rule_error({"data.train=runs/prep/x", "eval.every_steps=100"});
  CHECK(contains(message, "eval.every_steps = 100 needs a dev set: set data.dev"));
  CHECK_NOTHROW(
      load_run_config(ScratchFile(R"({"train": {"device": "cpu", "precision": "fp32"}})").path(),
                      {"eval.every_steps=100"}));  // synthetic: brings its own dev set

  // The cpu device falls back to fp32 at start-up (engine/train/train_device.h), not an error.
  CHECK_NOTHROW(load_run_config(ScratchFile(R"({"train": {"device": "cpu"}})").path(),
                                {"train.precision=bf16", "dist.allreduce_dtype=fp16"}));

  message = rule_error({"data.train=synthetic:copy"});
  CHECK(contains(message, "unknown synthetic task (known: reverse)"));

  message = rule_error({"data.train="});
  CHECK(contains(message, "data.train is empty"));

  message = rule_error({"data.dev=runs/prep/x"});
  CHECK(contains(message, "data.dev must be empty when data.train is synthetic"));

  message = rule_error({"data.synthetic_min_len=20"});
  CHECK(
      contains(message, "data.synthetic_min_len (20) must not exceed data.synthetic_max_len (12)"));

  message = rule_error({"data.max_tgt_len=8"});
  CHECK(contains(message, "data.synthetic_max_len (12) must fit"));

  message = rule_error({"model.max_positions=256"});
  CHECK(contains(message, "model.max_positions (256) must be at least"));

  message = rule_error({"train.batch_tokens=100"});
  CHECK(contains(message, "train.batch_tokens (100) must hold the longest allowed pair"));

  message = rule_error({"lr_schedule.warmup_steps=0"});
  CHECK(contains(message, "needs lr_schedule.warmup_steps >= 1"));
  CHECK_NOTHROW(
      load_run_config(ScratchFile(R"({"train": {"device": "cpu", "precision": "fp32"}})").path(),
                      {"lr_schedule.policy=constant", "lr_schedule.warmup_steps=0"}));

  message = rule_error({"lr_schedule.policy=cosine", "train.max_steps=500",
                        "lr_schedule.warmup_steps=800"});
  CHECK(contains(message, "decays until step 500 (train.max_steps), which is not after "
                          "lr_schedule.warmup_steps = 800"));
  message = rule_error({"lr_schedule.policy=linear", "lr_schedule.decay_steps=10",
                        "lr_schedule.warmup_steps=800"});
  CHECK(contains(message, "(lr_schedule.decay_steps)"));
  message = rule_error({"lr_schedule.policy=cosine", "lr_schedule.final_lr=9"});
  CHECK(contains(message, "lr_schedule.final_lr = 9.000000 is above"));
  CHECK_NOTHROW(
      load_run_config(ScratchFile(R"({"train": {"device": "cpu", "precision": "fp32"}})").path(),
                      {"lr_schedule.policy=cosine", "lr_schedule.warmup_steps=10",
                       "train.max_steps=100", "lr_schedule.final_lr=0.00001",
                       "lr_schedule.learning_rate=0.001"}));

  message = rule_error({"eval.early_stop_patience=3"});
  CHECK(contains(message, "eval.early_stop_patience = 3 needs eval.every_steps > 0"));

  message = rule_error({"checkpoint.every_steps=1000"});
  CHECK(contains(message, "checkpoint.every_steps = 1000 needs checkpoint.dir"));
}

TEST_CASE("edit distance", "[config]") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("abc", "") == 3);
  CHECK(edit_distance("d_modle", "d_model") == 2);
  CHECK(edit_distance("kitten", "sitting") == 3);
}

TEST_CASE("deeply nested and very long values give a short message, not a crash", "[config]") {
  // A million levels overflowed the stack while the message printed the value (issue 15).
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  std::string message = file_error(R"({"model": {"d_model": )" + deep + "}}");
  CHECK(contains(message, "nested deeper than 64 levels"));
  CHECK(message.size() < 400);

  // Within the bound, the nested value is quoted cut short.
  const std::string nested = std::string(60, '[') + std::string(60, ']');
  message = file_error(R"({"model": {"d_model": )" + nested + "}}");
  CHECK(contains(message, "model.d_model"));
  CHECK(message.size() < 400);

  message = file_error(R"({"model": {"norm": ")" + std::string(1000000, 'x') + "\"}}");
  CHECK(contains(message, "model.norm"));
  CHECK(contains(message, "(1000002 characters)"));
  CHECK(message.size() < 400);

  RunConfig cfg;
  message = config_error_of(
      [&] { apply_config_override(cfg, "model.norm=" + std::string(100000, 'y')); });
  CHECK(contains(message, "model.norm"));
  CHECK(message.size() < 400);
  message = config_error_of([&] { apply_config_override(cfg, std::string(100000, 'z') + "=1"); });
  CHECK(message.size() < 600);
}

}  // namespace
}  // namespace nmt
