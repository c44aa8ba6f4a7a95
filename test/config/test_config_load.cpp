// Config loading: defaults, file + --set overrides, the JSON round trip, the committed configs and
// the generated docs/config.md.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "engine/config/config.h"
#include "engine/config/config_schema.h"
#include "test/config/config_test_util.h"

namespace nmt {
namespace {

using test::ScratchFile;

std::string read_text(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

const std::string kDocsPath = std::string(NMT_SOURCE_DIR) + "/docs/config.md";

TEST_CASE("defaults are the documented contract and validate", "[config]") {
  const RunConfig cfg;
  CHECK(cfg.model.encoder_layers == 6);
  CHECK(cfg.model.decoder_layers == 6);
  CHECK(cfg.model.d_model == 512);
  CHECK(cfg.model.num_heads == 8);
  CHECK(cfg.model.ffn_dim == 2048);
  CHECK(cfg.model.dropout == 0.1);
  CHECK(cfg.model.norm == NormPosition::post);
  CHECK(cfg.model.shared_embeddings);
  CHECK(cfg.model.layernorm_eps == 1e-6);
  CHECK(cfg.data.train == "synthetic:reverse");
  CHECK(cfg.data.train_is_synthetic());
  CHECK(cfg.data.synthetic_task() == "reverse");
  CHECK(cfg.data.length_policy == LengthPolicy::kDrop);
  CHECK(cfg.train.batch_tokens == 4096);
  CHECK(cfg.train.update_freq == 1);
  CHECK_FALSE(cfg.train.device.has_value());  // auto: what the machine has
  CHECK(cfg.train.precision == DType::bf16);
  CHECK(cfg.optimizer.name == OptimizerKind::adam);
  CHECK(cfg.optimizer.beta2 == 0.997);
  CHECK(cfg.optimizer.epsilon == 1e-9);
  CHECK(cfg.lr_schedule.policy == LrPolicy::transformer_policy);
  CHECK(cfg.lr_schedule.learning_rate == 2.0);
  CHECK(cfg.lr_schedule.warmup_steps == 8000);
  CHECK(cfg.eval.every_steps == 0);
  CHECK(cfg.checkpoint.keep == 5);
  CHECK(cfg.log.every_steps == 10);
  CHECK(cfg.dist.bucket_mb == 25.0);
  CHECK(cfg.dist.allreduce_dtype == DType::f32);
  CHECK_NOTHROW(validate_run_config(cfg));

  // An empty file is a valid config: every key takes its default.
  ScratchFile empty("{}");
  CHECK(to_json(load_run_config(empty.path(), {})) == to_json(cfg));
}

TEST_CASE("the schema is well formed", "[config]") {
  std::set<std::string> paths;
  for (const ConfigKey& key : config_keys()) {
    INFO(key.path());
    CHECK(find_config_section(key.section) != nullptr);
    CHECK(paths.insert(key.path()).second);
    CHECK(!key.doc.empty());
    CHECK(key.doc.find('\n') == std::string::npos);
    CHECK(find_config_key(key.section, key.name) == &key);
    CHECK((key.type == KeyType::choice) == !key.choices.empty());
  }
  for (const ConfigSection& section : config_sections()) {
    INFO(section.name);
    CHECK(to_json(RunConfig{}).contains(section.name));
  }
  CHECK(to_json(RunConfig{}).size() == config_sections().size());
}

TEST_CASE("a file plus --set overrides, applied in order", "[config]") {
  ScratchFile file(R"({
    // comments are allowed
    "model": {"d_model": 256, "num_heads": 4, "norm": "pre"},
    "train": {"device": "cpu", "precision": "fp32", "max_steps": 1e5}
  })");
  const RunConfig cfg =
      load_run_config(file.path(), {"model.dropout=0.3", "train.max_steps=2000",
                                    "optimizer.name=lazyadam", "model.shared_embeddings=false",
                                    "log.dir=runs/a=b", "train.max_steps=3e3", "data.dev="});
  CHECK(cfg.model.d_model == 256);
  CHECK(cfg.model.num_heads == 4);
  CHECK(cfg.model.norm == NormPosition::pre);
  CHECK(cfg.model.dropout == 0.3);
  CHECK(cfg.model.ffn_dim == 2048);  // not named anywhere: the default
  CHECK(cfg.train.device == Device::cpu);
  CHECK(cfg.train.max_steps == 3000);  // the last override wins
  CHECK(cfg.optimizer.name == OptimizerKind::lazyadam);
  CHECK_FALSE(cfg.model.shared_embeddings);
  CHECK(cfg.log.dir == "runs/a=b");  // only the first '=' separates key and value
  CHECK(cfg.data.dev.empty());
}

TEST_CASE("integral floats are accepted for int keys", "[config]") {
  const RunConfig cfg =
      run_config_from_json(nlohmann::json::parse(R"({"train": {"max_steps": 1e5}})"));
  CHECK(cfg.train.max_steps == 100000);
}

TEST_CASE("to_json and run_config_from_json round trip every key", "[config]") {
  RunConfig cfg;
  cfg.model.encoder_layers = 3;
  cfg.model.d_model = 96;
  cfg.model.num_heads = 6;
  cfg.model.dropout = 0.25;
  cfg.model.layernorm_eps = 1e-5;
  cfg.model.norm = NormPosition::pre;
  cfg.data.train = "runs/prep/x";
  cfg.data.dev = "runs/prep/x";
  cfg.data.length_policy = LengthPolicy::kTruncate;
  cfg.train.device = Device::cpu;
  cfg.train.precision = DType::f32;
  cfg.train.seed = 4000000000;
  cfg.train.clip_norm = 1.5;
  cfg.optimizer.name = OptimizerKind::lazyadam;
  cfg.optimizer.epsilon = 1e-8;
  cfg.lr_schedule.policy = LrPolicy::inverse_sqrt;
  cfg.lr_schedule.learning_rate = 7e-4;
  cfg.eval.every_steps = 250;
  cfg.checkpoint.dir = "ckpt";
  cfg.checkpoint.every_steps = 100;
  cfg.log.tensorboard = false;
  cfg.dist.bucket_mb = 0.5;
  REQUIRE_NOTHROW(validate_run_config(cfg));

  const nlohmann::json json = to_json(cfg);
  CHECK(json["model"]["norm"] == "pre");
  CHECK(json["train"]["precision"] == "fp32");
  CHECK(json["optimizer"]["name"] == "lazyadam");
  size_t keys = 0;
  for (const auto& section : json) keys += section.size();
  CHECK(keys == config_keys().size());

  // Through text, as a checkpoint's state.json would carry it.
  const RunConfig back = run_config_from_json(nlohmann::json::parse(json.dump()), "state.json");
  CHECK(to_json(back) == json);
  CHECK(back.train.seed == 4000000000);
  CHECK(back.lr_schedule.learning_rate == 7e-4);
  CHECK(back.dist.bucket_mb == 0.5);

  // The ordered text form parses to the same JSON.
  CHECK(nlohmann::json::parse(format_run_config(cfg)) == json);
  CHECK(format_run_config(cfg).rfind("{\n  \"model\": {\n    \"encoder_layers\": 3", 0) == 0);
}

TEST_CASE("train.device auto: the default, spelled auto, set back by --set", "[config]") {
  CHECK(to_json(RunConfig{})["train"]["device"] == "auto");
  const ScratchFile file(R"({"train": {"device": "cpu"}})");
  CHECK(load_run_config(file.path(), {}).train.device == Device::cpu);
  const RunConfig back = load_run_config(file.path(), {"train.device=auto"});
  CHECK_FALSE(back.train.device.has_value());
  CHECK(run_config_from_json(to_json(back)).train.device == std::nullopt);
  CHECK(load_run_config(file.path(), {"train.device=cuda"}).train.device == Device::cuda);
}

TEST_CASE("enum spellings", "[config]") {
  CHECK(config_name(NormPosition::pre) == "pre");
  CHECK(config_name(LengthPolicy::kTruncate) == "truncate");
  CHECK(config_name(OptimizerKind::lazyadam) == "lazyadam");
  CHECK(config_name(LrPolicy::inverse_sqrt) == "inverse_sqrt");
  CHECK(config_name(Device::cuda) == "cuda");
  CHECK(config_name(DType::bf16) == "bf16");
  CHECK(config_name(DType::f16) == "fp16");
}

TEST_CASE("the committed configs validate", "[config]") {
  const std::string dir = std::string(NMT_SOURCE_DIR) + "/configs/";
  for (const std::filesystem::directory_entry& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    INFO(entry.path().string());
    CHECK_NOTHROW(load_run_config(entry.path().string(), {}));
  }

  const RunConfig base = load_run_config(dir + "transformer-base.json", {});
  CHECK(base.model.d_model == 512);
  CHECK(base.model.ffn_dim == 2048);
  CHECK(base.model.num_heads == 8);
  CHECK(base.model.encoder_layers == 6);
  CHECK(base.model.decoder_layers == 6);
  CHECK(base.model.dropout == 0.1);
  CHECK(base.train.label_smoothing == 0.1);
  CHECK(base.lr_schedule.policy == LrPolicy::transformer_policy);
  CHECK(base.lr_schedule.learning_rate == 2.0);
  CHECK(base.lr_schedule.warmup_steps == 8000);
  CHECK(base.optimizer.beta1 == 0.9);
  CHECK(base.optimizer.beta2 == 0.997);
  CHECK(base.optimizer.epsilon == 1e-9);
  CHECK(base.train.device == Device::cuda);
  CHECK(base.train.precision == DType::bf16);

  // The README's GPU configs run on any machine: the device is what the machine has.
  for (const char* name : {"bible-en-es.json", "lohelp-en-de.json"}) {
    INFO(name);
    CHECK_FALSE(load_run_config(dir + name, {}).train.device.has_value());
  }
  for (const char* name : {"bible-en-es.json", "lohelp-en-de.json", "bible-en-es-cpu.json"}) {
    INFO(name);  // the README says runs write TensorBoard events
    CHECK(load_run_config(dir + name, {}).log.tensorboard);
  }

  const RunConfig big = load_run_config(dir + "transformer-big.json", {});
  CHECK(big.model.d_model == 1024);
  CHECK(big.model.ffn_dim == 4096);
  CHECK(big.model.num_heads == 16);
  CHECK(big.model.dropout == 0.3);

  const RunConfig tiny = load_run_config(dir + "tiny-reverse-cpu.json", {});
  CHECK(tiny.data.train == "synthetic:reverse");
  CHECK(tiny.model.d_model == 64);
  CHECK(tiny.model.num_heads == 4);
  CHECK(tiny.train.device == Device::cpu);
  CHECK(tiny.train.precision == DType::f32);
  CHECK(tiny.eval.every_steps == 400);
  CHECK(tiny.log.every_steps == 50);
}

TEST_CASE("docs/config.md is generated from the schema", "[config]") {
  const std::string expected = config_reference_markdown();
  for (const ConfigKey& key : config_keys())
    CHECK(test::contains(expected, std::string("`").append(key.path()).append("`")));
  if (read_text(kDocsPath) != expected) {
    FAIL(kDocsPath << " is stale: regenerate with "
                   << std::filesystem::read_symlink("/proc/self/exe").string()
                   << " \"[regenerate-docs]\"");
  }
}

// Hidden: runs only when asked for by its tag. Writes docs/config.md via a temp file + rename.
TEST_CASE("regenerate docs/config.md", "[.][regenerate-docs]") {
  const std::string temp = kDocsPath + ".tmp." + std::to_string(getpid());
  {
    std::ofstream file(temp, std::ios::binary);
    file << config_reference_markdown();
    REQUIRE(file.good());
  }
  std::filesystem::rename(temp, kDocsPath);
  CHECK(read_text(kDocsPath) == config_reference_markdown());
}

}  // namespace
}  // namespace nmt
