// Checkpoint directories: save → load restores parameters and Adam moments bit for bit; pruning
// keeps the last K and the best; crash leftovers and broken checkpoints are skipped; a failed
// save leaves the earlier checkpoints intact; a changed model lists its differences.
#include <sys/resource.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_links.h"
#include "engine/model/transformer.h"
#include "test/checkpoint/python_oracle.h"
#include "test/support/catch.h"

namespace fs = std::filesystem;
using nmt::test::error_of;
using nmt::test::ScratchDir;

namespace {

nmt::RunConfig tiny_config(int64_t ffn_dim = 16, int64_t layers = 1, bool shared = true) {
  nmt::RunConfig cfg;
  cfg.model.encoder_layers = cfg.model.decoder_layers = layers;
  cfg.model.d_model = 8;
  cfg.model.num_heads = 2;
  cfg.model.ffn_dim = ffn_dim;
  cfg.model.shared_embeddings = shared;
  cfg.train.device = nmt::Device::cpu;
  cfg.train.precision = nmt::DType::f32;
  return cfg;
}

// A CPU model built from cfg, its parameters from `seed`, with Adam moment buffers.
struct TinyModel {
  std::unique_ptr<nmt::Transformer> model;
  std::vector<float> m, v;  // [params] f32 each

  TinyModel(const nmt::RunConfig& cfg, uint64_t seed) {
    nmt::ModelShape shape;
    shape.vocab = 13;
    shape.d_model = cfg.model.d_model;
    shape.heads = cfg.model.num_heads;
    shape.ffn_dim = cfg.model.ffn_dim;
    shape.encoder_layers = cfg.model.encoder_layers;
    shape.decoder_layers = cfg.model.decoder_layers;
    shape.shared_embeddings = cfg.model.shared_embeddings;
    model = std::make_unique<nmt::Transformer>(shape, nmt::Device::cpu, 16, 8);
    model->params().initialize(seed);
    size_t n = static_cast<size_t>(params().total_elements());
    m.resize(n);
    v.resize(n);
    for (size_t i = 0; i < n; ++i) {
      m[i] = static_cast<float>(seed) * 1e-3f - static_cast<float>(i) * 1e-5f;
      v[i] = static_cast<float>(i % 97) * 1e-7f + static_cast<float>(seed) * 1e-9f;
    }
  }
  nmt::ParamStore& params() { return model->params(); }
  nmt::Tensor m_tensor() {
    return {m.data(), nmt::DType::f32, nmt::Device::cpu, {(int64_t)m.size()}};
  }
  nmt::Tensor v_tensor() {
    return {v.data(), nmt::DType::f32, nmt::Device::cpu, {(int64_t)v.size()}};
  }
  std::vector<float> weights() {
    const float* p = params().master().f32();
    return std::vector<float>(p, p + params().total_elements());
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

nmt::CheckpointState state_at(int64_t step) {
  nmt::CheckpointState s;
  s.step = step;
  s.epoch = 2;
  s.data_position = {{"epoch", 2}, {"batch", 17}, {"order_seed", 99}};
  s.seed = 1234;
  s.loss_scale = 32768;
  s.lr_schedule = {{"lr", 3e-4}};
  s.extra = {{"patience_left", 3}};
  return s;
}

nmt::SavedCheckpoint save(TinyModel& t, const std::string& dir, int64_t step, int64_t keep = 0,
                          std::optional<nmt::CheckpointMetric> metric = std::nullopt,
                          const nmt::RunConfig& cfg = tiny_config()) {
  return nmt::save_checkpoint(dir, t.params(), t.m_tensor(), t.v_tensor(), state_at(step), cfg,
                              keep, metric);
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

void flip_byte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ 0x20));
}

}  // namespace

TEST_CASE("save then load restores parameters, Adam moments and state bit for bit",
          "[checkpoint]") {
  ScratchDir dir("nmt-ckpt");
  TinyModel saved_model(tiny_config(), 1);
  nmt::SavedCheckpoint saved = save(saved_model, dir.path(), 100);
  CHECK(saved.path == dir.path() + "/ckpt-100");
  CHECK(entries(saved.path) ==
        std::vector<std::string>{"model.safetensors", "optimizer.safetensors", "state.json"});
  CHECK(entries(dir.path()) == std::vector<std::string>{"ckpt-100", "last"});
  CHECK(saved.bytes > 0);

  TinyModel loaded(tiny_config(), 2);
  REQUIRE(!same_bits(loaded.weights(), saved_model.weights()));
  nmt::LoadedCheckpoint ck = nmt::load_checkpoint(saved.path, loaded.params(), loaded.m_tensor(),
                                                  loaded.v_tensor(), tiny_config());
  CHECK(same_bits(loaded.weights(), saved_model.weights()));
  CHECK(same_bits(loaded.m, saved_model.m));
  CHECK(same_bits(loaded.v, saved_model.v));
  nmt::CheckpointState expected = state_at(100);
  CHECK(ck.state.step == 100);
  CHECK(ck.state.epoch == expected.epoch);
  CHECK(ck.state.data_position == expected.data_position);
  CHECK(ck.state.seed == expected.seed);
  CHECK(ck.state.loss_scale == expected.loss_scale);
  CHECK(ck.state.lr_schedule == expected.lr_schedule);
  CHECK(ck.state.extra == expected.extra);
  CHECK(nmt::to_json(ck.config) == nmt::to_json(tiny_config()));
  CHECK(ck.has_optimizer);

  nmt::LoadedCheckpoint info = nmt::read_checkpoint_state(saved.path);
  CHECK(info.config.model.ffn_dim == 16);
  CHECK(nmt::find_latest_checkpoint(dir.path()) == saved.path);
}

TEST_CASE("a shared embedding is stored once and its aliases load a model that unties it",
          "[checkpoint]") {
  ScratchDir dir("nmt-ckpt-alias");
  TinyModel shared(tiny_config(), 3);
  std::string path = save(shared, dir.path(), 5).path;
  TinyModel untied(tiny_config(16, 1, false), 4);
  nmt::load_model_weights(path, untied.params());
  const nmt::Param* table = shared.params().find("encoder.embed_tokens.weight");
  for (const char* name : {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
                           "decoder.output_projection.weight"}) {
    INFO(name);
    const nmt::Param* p = untied.params().find(name);
    REQUIRE(p);
    CHECK(std::memcmp(p->value.f32(), table->value.f32(), table->numel * sizeof(float)) == 0);
  }
}

TEST_CASE("pruning keeps the last K checkpoints and the best one", "[checkpoint]") {
  ScratchDir dir("nmt-ckpt-keep");
  TinyModel t(tiny_config(), 1);
  const double bleu[] = {10, 30, 20, 15, 12};
  for (int i = 0; i < 5; ++i) {
    nmt::SavedCheckpoint s =
        save(t, dir.path(), 100 * (i + 1), 2, nmt::CheckpointMetric{"bleu", bleu[i]});
    CHECK(s.is_best == (i == 0 || i == 1));
    CHECK(s.warnings.empty());
  }
  CHECK(entries(dir.path()) ==
        std::vector<std::string>{"best", "best.json", "ckpt-200", "ckpt-400", "ckpt-500", "last"});
  std::optional<nmt::BestCheckpoint> best = nmt::read_best_checkpoint(dir.path());
  REQUIRE(best);
  CHECK(best->step == 200);
  CHECK(best->metric.value == 30);
  CHECK(best->path == dir.path() + "/ckpt-200");

  SECTION("lower is better, and keep 0 keeps everything") {
    ScratchDir loss_dir("nmt-ckpt-loss");
    const double loss[] = {3.0, 2.5, 2.7};
    for (int i = 0; i < 3; ++i)
      save(t, loss_dir.path(), i + 1, 0, nmt::CheckpointMetric{"dev_loss", loss[i], false});
    CHECK(nmt::read_best_checkpoint(loss_dir.path())->step == 2);
    CHECK(entries(loss_dir.path()).size() == 6);
  }
}

TEST_CASE("find_latest_checkpoint ignores crash leftovers and skips broken checkpoints",
          "[checkpoint]") {
  ScratchDir dir("nmt-ckpt-latest");
  TinyModel t(tiny_config(), 1);
  std::string good = save(t, dir.path(), 100).path;
  std::string newer = save(t, dir.path(), 200).path;
  // A save that crashed half way: a temporary directory with a partial file.
  fs::create_directory(dir.path() + "/.ckpt-300.tmp-4242");
  std::ofstream(dir.path() + "/.ckpt-300.tmp-4242/model.safetensors") << "partial";
  // A newer checkpoint whose model file lost its tail.
  fs::resize_file(newer + "/model.safetensors", fs::file_size(newer + "/model.safetensors") - 10);
  std::ostringstream warnings;
  CHECK(nmt::find_latest_checkpoint(dir.path(), warnings) == good);
  CHECK(warnings.str().find(newer + "/model.safetensors is truncated") != std::string::npos);
  CHECK(warnings.str().find(".tmp-") == std::string::npos);
  CHECK(!nmt::find_latest_checkpoint(dir.path() + "/does-not-exist"));
  // The next save clears the leftover.
  save(t, dir.path(), 400);
  CHECK(!fs::exists(dir.path() + "/.ckpt-300.tmp-4242"));
}

TEST_CASE("a truncated or corrupt checkpoint file is an error naming it", "[checkpoint]") {
  ScratchDir dir("nmt-ckpt-corrupt");
  TinyModel t(tiny_config(), 1);
  std::string path = save(t, dir.path(), 7).path;
  std::string model_file = path + "/model.safetensors";
  std::string optimizer_file = path + "/optimizer.safetensors";
  TinyModel target(tiny_config(), 2);
  std::vector<float> before = target.weights();
  auto load_error = [&] {
    return error_of([&] {
      nmt::load_checkpoint(path, target.params(), target.m_tensor(), target.v_tensor(),
                           tiny_config());
    });
  };
  SECTION("one flipped byte in the data") {
    flip_byte(optimizer_file, fs::file_size(optimizer_file) - 5);
    std::string message = load_error();
    CHECK(message.find(optimizer_file + " is corrupt") != std::string::npos);
  }
  SECTION("a truncated file") {
    fs::resize_file(model_file, 100);
    CHECK(load_error().find(model_file + " is truncated") != std::string::npos);
  }
  SECTION("a garbled state.json") {
    std::ofstream(path + "/state.json") << "{\"step\": 7, \"config\": {";
    CHECK(load_error().find(path + "/state.json: not valid JSON") != std::string::npos);
  }
  SECTION("a missing file") {
    fs::remove(model_file);
    CHECK(load_error().find(model_file) != std::string::npos);
  }
  CHECK(same_bits(target.weights(), before));  // a failed load leaves the model as it was
}

TEST_CASE("a failed save is an error and leaves the earlier checkpoints intact", "[checkpoint]") {
  ScratchDir dir("nmt-ckpt-fail");
  TinyModel t(tiny_config(), 1);
  std::string previous = save(t, dir.path(), 100).path;

  SECTION("a checkpoint directory whose parent is a regular file") {
    ScratchDir other("nmt-ckpt-file");
    std::ofstream(other.path() + "/plain-file") << "x";
    std::string bad = other.path() + "/plain-file/ckpts";
    std::string message = error_of([&] { save(t, bad, 200); });
    CHECK(message.find("cannot create checkpoint directory " + bad) != std::string::npos);
  }
  SECTION("the disk fills up while writing (file size limit)") {
    // RLIMIT_FSIZE makes write(2) fail with EFBIG like a full disk's ENOSPC; running as root does
    // not bypass it. SIGXFSZ would kill the process: ignore it for the test.
    auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit old_limit{};
    getrlimit(RLIMIT_FSIZE, &old_limit);
    rlimit small = old_limit;
    small.rlim_cur = 2048;
    setrlimit(RLIMIT_FSIZE, &small);
    std::string message = error_of([&] { save(t, dir.path(), 200, 1); });
    setrlimit(RLIMIT_FSIZE, &old_limit);
    std::signal(SIGXFSZ, old_handler);
    CHECK(message.find("cannot write " + dir.path() + "/.ckpt-200.tmp-") != std::string::npos);
    CHECK(message.find("model.safetensors") != std::string::npos);
  }
  // No half checkpoint; `last` still names the previous one.
  CHECK(entries(dir.path()) == std::vector<std::string>{"ckpt-100", "last"});
  CHECK(fs::read_symlink(dir.path() + "/last") == "ckpt-100");
  std::ostringstream warnings;
  CHECK(nmt::find_latest_checkpoint(dir.path(), warnings) == previous);
  CHECK(warnings.str().empty());
  TinyModel loaded(tiny_config(), 2);
  nmt::load_checkpoint(previous, loaded.params(), loaded.m_tensor(), loaded.v_tensor(),
                       tiny_config());
  CHECK(same_bits(loaded.weights(), t.weights()));
}

TEST_CASE("loading into a changed model lists every difference", "[checkpoint]") {
  ScratchDir dir("nmt-ckpt-shape");
  TinyModel t(tiny_config(16, 2), 1);
  std::string path = save(t, dir.path(), 10, 0, std::nullopt, tiny_config(16, 2)).path;
  nmt::RunConfig changed = tiny_config(32, 1);
  TinyModel other(changed, 2);
  std::vector<float> before = other.weights();
  std::string message = error_of([&] {
    nmt::load_checkpoint(path, other.params(), other.m_tensor(), other.v_tensor(), changed);
  });
  INFO(message);
  CHECK(message.find(path + "/model.safetensors does not match the model") != std::string::npos);
  CHECK(message.find("encoder.layers.0.fc1.weight: saved [16, 8] vs model [32, 8]") !=
        std::string::npos);
  CHECK(message.find("not in the model: encoder.layers.1.fc1.weight [16, 8]") != std::string::npos);
  CHECK(message.find("model.ffn_dim: saved 16, now 32") != std::string::npos);
  CHECK(message.find("model.encoder_layers: saved 2, now 1") != std::string::npos);
  CHECK(same_bits(other.weights(), before));

  // A model with a parameter the checkpoint lacks: "missing from the checkpoint".
  TinyModel untied(tiny_config(16, 2, false), 3);
  std::string no_alias_dir = dir.path() + "/plain";
  nmt::RunConfig untied_cfg = tiny_config(16, 2, false);
  std::string untied_path = save(untied, no_alias_dir, 1, 0, std::nullopt, untied_cfg).path;
  std::string missing = error_of([&] { nmt::load_model_weights(untied_path, t.params()); });
  CHECK(missing.find("not in the model: decoder.embed_tokens.weight [13, 8]") != std::string::npos);
  std::string extra = error_of([&] {
    TinyModel three_layers(tiny_config(16, 3, false), 4);
    nmt::load_model_weights(untied_path, three_layers.params());
  });
  CHECK(extra.find("missing from the checkpoint: decoder.layers.2.fc1.weight [16, 8]") !=
        std::string::npos);
}

TEST_CASE("a weights-only checkpoint cannot resume the optimizer; the vocabulary is checked",
          "[checkpoint]") {
  ScratchDir dir("nmt-ckpt-misc");
  TinyModel t(tiny_config(), 1);
  std::string vocab = dir.path() + "/vocab.model";
  std::ofstream(vocab) << "a vocabulary";
  nmt::CheckpointState state = state_at(9);
  state.vocab_path = vocab;
  std::string path =
      nmt::save_checkpoint(dir.path() + "/c", t.params(), {}, {}, state, tiny_config(), 0).path;
  CHECK(!fs::exists(path + "/optimizer.safetensors"));
  std::string message = error_of(
      [&] { nmt::load_checkpoint(path, t.params(), t.m_tensor(), t.v_tensor(), tiny_config()); });
  CHECK(message.find("has no optimizer.safetensors") != std::string::npos);
  nmt::LoadedCheckpoint ck = nmt::load_model_weights(path, t.params());
  CHECK(!ck.has_optimizer);
  CHECK(ck.state.vocab_crc32c.size() == 10);
  nmt::check_checkpoint_vocabulary(ck.state, vocab);
  std::ofstream(vocab) << "another vocabulary";
  CHECK(error_of([&] {
          nmt::check_checkpoint_vocabulary(ck.state, vocab);
        }).find("is not the one the checkpoint was trained with") != std::string::npos);

  // Saving the same step again replaces the checkpoint.
  nmt::SavedCheckpoint again = nmt::save_checkpoint(dir.path() + "/c", t.params(), t.m_tensor(),
                                                    t.v_tensor(), state_at(9), tiny_config(), 0);
  CHECK(fs::exists(again.path + "/optimizer.safetensors"));
  CHECK(entries(dir.path() + "/c") == std::vector<std::string>{"ckpt-9", "last"});
}

TEST_CASE("a checkpoint carries a copy of its vocabulary, found relative to the checkpoint",
          "[checkpoint]") {
  ScratchDir dir("nmt-ckpt-vocab");
  TinyModel t(tiny_config(), 1);
  fs::create_directories(dir.path() + "/prep");
  const std::string vocab = dir.path() + "/prep/spm.model";
  std::ofstream(vocab) << "the sentencepiece model";
  nmt::CheckpointState state = state_at(3);
  state.vocab_path = vocab;
  nmt::SavedCheckpoint saved =
      nmt::save_checkpoint(dir.path() + "/c", t.params(), {}, {}, state, tiny_config(), 0);
  CHECK(saved.files.at("spm.model") == 23);
  fs::remove_all(dir.path() + "/prep");  // training's directory is gone (or elsewhere)
  nmt::LoadedCheckpoint ck = nmt::read_checkpoint_state(saved.path);
  CHECK(ck.state.vocab_file == "spm.model");
  CHECK(ck.state.vocab_path == vocab);
  CHECK(nmt::checkpoint_vocabulary_file(ck) == saved.path + "/spm.model");
  nmt::check_checkpoint_vocabulary(ck.state, nmt::checkpoint_vocabulary_file(ck));
  CHECK_NOTHROW(nmt::validate_checkpoint(saved.path));

  // A checkpoint of an older build names only the training-time path.
  ck.state.vocab_file.clear();
  CHECK(nmt::checkpoint_vocabulary_file(ck) == vocab);

  // The copy is part of the checkpoint: a changed copy makes it invalid.
  std::ofstream(saved.path + "/spm.model") << "another model";
  CHECK(error_of([&] {
          nmt::validate_checkpoint(saved.path);
        }).find(saved.path + "/spm.model is corrupt") != std::string::npos);
}

TEST_CASE("last and best links follow the saves; --checkpoint takes the checkpoint.dir",
          "[checkpoint]") {
  ScratchDir dir("nmt-ckpt-links");
  TinyModel t(tiny_config(), 1);
  const double bleu[] = {10, 30, 20};
  for (int i = 0; i < 3; ++i)
    save(t, dir.path(), 100 * (i + 1), 0, nmt::CheckpointMetric{"bleu", bleu[i]});
  CHECK(fs::read_symlink(dir.path() + "/last") == "ckpt-300");
  CHECK(fs::read_symlink(dir.path() + "/best") == "ckpt-200");
  CHECK_NOTHROW(nmt::validate_checkpoint(dir.path() + "/last"));

  std::ostringstream note;
  CHECK(nmt::resolve_checkpoint_argument(dir.path(), "tool", note) == dir.path() + "/ckpt-200");
  CHECK(note.str() == "tool: " + dir.path() + " is a checkpoint.dir: using " + dir.path() +
                          "/ckpt-200 (best bleu 30)\n");
  note.str("");
  const std::string one = dir.path() + "/ckpt-100";
  CHECK(nmt::resolve_checkpoint_argument(one, "tool", note) == one);
  CHECK(nmt::resolve_checkpoint_argument(dir.path() + "/last", "tool", note) ==
        dir.path() + "/last");
  CHECK(note.str().empty());

  // No evaluation, no best: the newest complete checkpoint.
  ScratchDir plain("nmt-ckpt-links-plain");
  save(t, plain.path(), 5);
  save(t, plain.path(), 7);
  CHECK(!fs::exists(plain.path() + "/best"));
  CHECK(nmt::resolve_checkpoint_argument(plain.path(), "tool", note) == plain.path() + "/ckpt-7");
  CHECK(note.str().find("(the newest; no best recorded)") != std::string::npos);

  ScratchDir empty("nmt-ckpt-links-empty");
  CHECK(error_of([&] {
          nmt::resolve_checkpoint_argument(empty.path(), "tool", note);
        }).find("is neither a checkpoint (no state.json) nor a checkpoint.dir") !=
        std::string::npos);
  // A crash between creating and renaming a link leaves a temporary name the next save removes.
  fs::create_directory_symlink("ckpt-5", plain.path() + "/.ckpt-last.tmp-1");
  save(t, plain.path(), 9);
  CHECK(!fs::exists(plain.path() + "/.ckpt-last.tmp-1"));
  CHECK(fs::read_symlink(plain.path() + "/last") == "ckpt-9");
}

TEST_CASE("a `last` that cannot be replaced does not stop `best` from following the saves",
          "[checkpoint]") {
  ScratchDir dir("nmt-ckpt-links-blocked");
  TinyModel t(tiny_config(), 1);
  fs::create_directory(dir.path() + "/last");  // a user's folder: the link cannot replace it
  save(t, dir.path(), 100, 0, nmt::CheckpointMetric{"bleu", 10});
  nmt::SavedCheckpoint s = save(t, dir.path(), 200, 0, nmt::CheckpointMetric{"bleu", 30});
  CHECK(!s.warnings.empty());
  CHECK(fs::is_directory(dir.path() + "/last"));
  REQUIRE(fs::is_symlink(dir.path() + "/best"));
  CHECK(fs::read_symlink(dir.path() + "/best") == "ckpt-200");
}
