// Model export and averaging: the .npz writer against numpy, the Marian export's names, layouts and
// position table, vocab.yml quoting, and checkpoint averaging (exact mean, identity for one input,
// one-model checks). The CTranslate2 round trip is ct2_roundtrip_test.sh.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_average.h"
#include "engine/checkpoint/marian_export.h"
#include "engine/checkpoint/npz_writer.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/model/transformer.h"
#include "engine/train/trainer.h"
#include "kernels/sinusoid.h"
#include "test/checkpoint/python_oracle.h"
#include "test/support/catch.h"

namespace fs = std::filesystem;
using nmt::test::error_of;
using nmt::test::ScratchDir;

namespace {

constexpr int64_t kVocab = 13;  // 4 special ids + the 9 pieces of write_piece_vocab

nmt::RunConfig tiny_config(bool pre_norm, bool shared, int64_t ffn_dim = 16) {
  nmt::RunConfig cfg;
  cfg.model.encoder_layers = 2;
  cfg.model.decoder_layers = 2;
  cfg.model.d_model = 8;
  cfg.model.num_heads = 2;
  cfg.model.ffn_dim = ffn_dim;
  cfg.model.norm = pre_norm ? nmt::NormPosition::pre : nmt::NormPosition::post;
  cfg.model.shared_embeddings = shared;
  cfg.model.layernorm_eps = 1e-5;
  cfg.model.max_positions = 20;
  cfg.data.max_src_len = 16;
  cfg.data.max_tgt_len = 16;
  cfg.train.device = nmt::Device::cpu;
  cfg.train.precision = nmt::DType::f32;
  return cfg;
}

std::unique_ptr<nmt::Transformer> tiny_model(const nmt::RunConfig& cfg, uint64_t seed) {
  nmt::ModelShape shape = nmt::model_shape_from(cfg.model, kVocab);
  auto model = std::make_unique<nmt::Transformer>(shape, nmt::Device::cpu, 16, 8);
  model->params().initialize(seed);
  return model;
}

// A weights-only checkpoint <dir>/ckpt-<step> of a model drawn from `seed`.
std::string save_tiny(const std::string& dir, const nmt::RunConfig& cfg, uint64_t seed,
                      int64_t step, const std::string& vocab = "") {
  auto model = tiny_model(cfg, seed);
  nmt::CheckpointState state;
  state.step = step;
  state.vocab_path = vocab;
  return nmt::save_checkpoint(dir, model->params(), nmt::Tensor(), nmt::Tensor(), state, cfg, 0)
      .path;
}

std::string write_piece_vocab(const ScratchDir& dir) {
  std::string path = dir.file("pieces.vocab");
  std::ofstream(path) << "a\nb\nq\"u\nback\\slash\n\xE2\x96\x81the\nc\nd\ne\nf\n";
  return path;
}

// name -> flat values of one tensor of model.safetensors (aliases not resolved).
std::vector<float> stored(const std::string& checkpoint, const std::string& name) {
  nmt::SafetensorsReader reader(checkpoint + "/model.safetensors");
  const nmt::SafetensorsTensorInfo* t = reader.find(name);
  REQUIRE(t);
  std::vector<float> values(static_cast<size_t>(t->numel()));
  reader.read_f32(name, t->shape, values.data());
  return values;
}

std::vector<float> values_of(const nlohmann::json& entry) {
  std::vector<float> out;
  for (const auto& v : entry["values"]) out.push_back(static_cast<float>(v.get<double>()));
  return out;
}

}  // namespace

TEST_CASE("zip_crc32 is zlib's CRC-32", "[export]") {
  CHECK(nmt::zip_crc32("123456789", 9) == 0xCBF43926u);  // the standard check value
  CHECK(nmt::zip_crc32("6789", 4, nmt::zip_crc32("12345", 5)) == 0xCBF43926u);
}

TEST_CASE("write_npz writes archives numpy reads back exactly", "[export]") {
  ScratchDir dir("nmt-npz");
  std::vector<float> a = {0.25f, -1.5f, 3e-8f, 1e30f, -0.0f, 7.0f};
  std::vector<float> b = {1, 2, 3, 4};
  float c = 2.5f;
  std::string text = "type: x\n";
  text += '\0';
  std::vector<float> empty;
  std::string path = dir.file("m.npz");
  nmt::write_npz(path, {{"a", "<f4", {2, 3}, a.data()},
                        {"b", "<f4", {4}, b.data()},
                        {"c", "<f4", {}, &c},
                        {"special:model.yml", "|i1", {(int64_t)text.size()}, text.data()},
                        {"e", "<f4", {0, 3}, empty.data()}});
  nlohmann::json seen = nmt::test::run_python_oracle("test/export/read_npz.py", path, dir.path());
  CHECK(seen.size() == 5);
  CHECK(seen["a"]["dtype"] == "<f4");
  CHECK(seen["a"]["shape"] == nlohmann::json::array({2, 3}));
  CHECK(values_of(seen["a"]) == a);
  CHECK(std::signbit(values_of(seen["a"])[4]));
  CHECK(seen["b"]["shape"] == nlohmann::json::array({4}));
  CHECK(values_of(seen["b"]) == b);
  CHECK(seen["c"]["shape"] == nlohmann::json::array());
  CHECK(values_of(seen["c"]) == std::vector<float>{2.5f});
  CHECK(seen["special:model.yml"]["dtype"] == "|i1");
  CHECK(seen["special:model.yml"]["values"].size() == text.size());
  CHECK(seen["e"]["shape"] == nlohmann::json::array({0, 3}));

  SECTION("bad input is refused before anything is written") {
    std::string bad = dir.file("bad.npz");
    CHECK(error_of([&] {
            nmt::write_npz(bad, {{"a", "<f4", {1}, &c}, {"a", "<f4", {1}, &c}});
          }).find("duplicate array name 'a'") != std::string::npos);
    CHECK(error_of([&] {
            nmt::write_npz(bad, {{"a", "<f8", {1}, &c}});
          }).find("'<f8'") != std::string::npos);
    CHECK(error_of([&] {
            nmt::write_npz(bad, {{"x/y", "<f4", {1}, &c}});
          }).find("'x/y'") != std::string::npos);
    CHECK(error_of([&] {
            nmt::write_npz(dir.file("no/such/dir.npz"), {{"a", "<f4", {1}, &c}});
          }).find("no/such/dir.npz") != std::string::npos);
    CHECK(!fs::exists(bad));
  }
}

TEST_CASE("marian_vocab_line quotes pieces so that YAML and CTranslate2 read them back",
          "[export]") {
  CHECK(nmt::marian_vocab_line("\xE2\x96\x81the", 7) == "\"\xE2\x96\x81the\": 7\n");
  CHECK(nmt::marian_vocab_line("q\"u", 5) == "\"q\\\"u\": 5\n");
  CHECK(nmt::marian_vocab_line("a\\b", 6) == "\"a\\\\b\": 6\n");
  CHECK(nmt::marian_vocab_line("a:", 8) == "\"a:\": 8\n");
  CHECK(error_of([] { nmt::marian_vocab_line("a\nb", 9); }).find("piece 9") != std::string::npos);
  CHECK(error_of([] { nmt::marian_vocab_line("\\x41", 10); }).find("piece 10") !=
        std::string::npos);
  CHECK(error_of([] { nmt::marian_vocab_line("", 11); }).find("piece 11") != std::string::npos);
}

TEST_CASE("export_marian writes every weight under Marian's name and layout", "[export]") {
  bool pre = GENERATE(true, false);
  bool shared = GENERATE(true, false);
  CAPTURE(pre, shared);
  ScratchDir dir("nmt-marian");
  std::string vocab = write_piece_vocab(dir);
  nmt::RunConfig cfg = tiny_config(pre, shared);
  std::string ckpt = save_tiny(dir.file("ckpt"), cfg, 3, 40, vocab);
  std::string out = dir.file("export");
  nmt::MarianExportResult result = nmt::export_marian({ckpt, out, ""});
  CHECK(result.step == 40);
  CHECK(fs::exists(out + "/model.npz"));
  CHECK(fs::exists(out + "/vocab.yml"));
  CHECK(fs::exists(out + "/pieces.vocab"));

  nlohmann::json npz =
      nmt::test::run_python_oracle("test/export/read_npz.py", out + "/model.npz", dir.path());
  const int64_t d = 8, f = 16;
  // Per layer: 4 projections x (W, b), 1 norm x 2 (+ cross attention's 10), ffn 4 + norm 2.
  int64_t expected = 1 + 2 * 16 + 2 * 26 + (shared ? 1 : 3) + (pre ? 4 : 0) + 1;
  CHECK(static_cast<int64_t>(npz.size()) == expected);
  CHECK(result.tensors == expected);

  // [out, in] in the checkpoint, [in, out] in Marian's file.
  std::vector<float> q = stored(ckpt, "decoder.layers.1.encoder_attn.q_proj.weight");
  std::vector<float> wq = values_of(npz["decoder_l2_context_Wq"]);
  CHECK(npz["decoder_l2_context_Wq"]["shape"] == nlohmann::json::array({d, d}));
  bool transposed = true;
  for (int64_t r = 0; r < d; ++r)
    for (int64_t c = 0; c < d; ++c) transposed &= wq[c * d + r] == q[r * d + c];
  CHECK(transposed);
  std::vector<float> fc1 = stored(ckpt, "encoder.layers.0.fc1.weight");  // [f, d]
  std::vector<float> w1 = values_of(npz["encoder_l1_ffn_W1"]);           // [d, f]
  CHECK(npz["encoder_l1_ffn_W1"]["shape"] == nlohmann::json::array({d, f}));
  CHECK(w1[3 * f + 5] == fc1[5 * d + 3]);
  CHECK(npz["encoder_l1_ffn_b1"]["shape"] == nlohmann::json::array({1, f}));
  CHECK(values_of(npz["encoder_l1_ffn_b1"]) == stored(ckpt, "encoder.layers.0.fc1.bias"));

  std::string suffix = pre ? "_pre" : "";
  CHECK(values_of(npz["decoder_l1_context_Wo_ln_scale" + suffix]) ==
        stored(ckpt, "decoder.layers.0.encoder_attn_layer_norm.weight"));
  CHECK(values_of(npz["encoder_l2_ffn_ffn_ln_bias" + suffix]) ==
        stored(ckpt, "encoder.layers.1.final_layer_norm.bias"));
  CHECK(npz.contains("encoder_top_ln_scale") == pre);
  CHECK(npz.contains("decoder_top_ln_bias") == pre);
  if (pre) CHECK(values_of(npz["decoder_top_ln_bias"]) == stored(ckpt, "decoder.layer_norm.bias"));

  if (shared) {
    CHECK(values_of(npz["Wemb"]) == stored(ckpt, "encoder.embed_tokens.weight"));
    CHECK(!npz.contains("decoder_ff_logit_out_Wt"));
  } else {
    CHECK(values_of(npz["decoder_Wemb"]) == stored(ckpt, "decoder.embed_tokens.weight"));
    CHECK(values_of(npz["decoder_ff_logit_out_Wt"]) ==
          stored(ckpt, "decoder.output_projection.weight"));
  }

  // The position table is ours exactly: [max_positions, d_model].
  CHECK(npz["Wpos"]["shape"] == nlohmann::json::array({20, d}));
  std::vector<float> pos = values_of(npz["Wpos"]);
  bool same_positions = true;
  for (int64_t p = 0; p < 20; ++p)
    for (int64_t i = 0; i < d; ++i)
      same_positions &= pos[p * d + i] == nmt::sinusoid_value(p, i, d);
  CHECK(same_positions);

  std::string yml;
  for (const auto& c : npz["special:model.yml"]["values"]) yml += static_cast<char>(c.get<int>());
  CHECK(yml.back() == '\0');
  CHECK(yml.find(pre ? "transformer-preprocess: \"n\"\n" : "transformer-preprocess: \"\"\n") !=
        std::string::npos);
  CHECK(yml.find(pre ? "transformer-postprocess: \"da\"\n"
                     : "transformer-postprocess: \"dan\"\n") != std::string::npos);
  CHECK(yml.find("enc-depth: 2\n") != std::string::npos);

  std::string vocab_yml = nmt::read_text_file(out + "/vocab.yml");
  CHECK(vocab_yml.starts_with("\"<pad>\": 0\n\"<unk>\": 1\n\"<s>\": 2\n\"</s>\": 3\n\"a\": 4\n"));
  CHECK(vocab_yml.find("\"q\\\"u\": 6\n") != std::string::npos);
  nlohmann::json info = nlohmann::json::parse(nmt::read_text_file(out + "/export.json"));
  CHECK(info["ctranslate2"]["layer_norm_epsilon"] == 1e-5);
  CHECK(info["ctranslate2"]["add_source_eos"] == false);
  CHECK(info["ctranslate2"]["decoder_start_from_zero_embedding"] == false);
  CHECK(info["vocabulary"]["file"] == "pieces.vocab");
}

TEST_CASE("export_marian refuses bad input with one message and writes nothing", "[export]") {
  ScratchDir dir("nmt-marian-err");
  std::string vocab = write_piece_vocab(dir);
  nmt::RunConfig cfg = tiny_config(true, true);
  std::string with_vocab = save_tiny(dir.file("a"), cfg, 1, 5, vocab);
  std::string without = save_tiny(dir.file("b"), cfg, 1, 5);
  fs::create_directory(dir.file("taken"));
  CHECK(error_of([&] {
          nmt::export_marian({with_vocab, dir.file("taken"), ""});
        }).find("taken exists") != std::string::npos);
  CHECK(error_of([&] {
          nmt::export_marian({without, dir.file("x"), ""});
        }).find("records no vocabulary") != std::string::npos);
  CHECK(error_of([&] {
          nmt::export_marian({dir.file("nope"), dir.file("x"), ""});
        }).find("nope") != std::string::npos);
  std::string other = dir.file("other.vocab");
  std::ofstream(other) << "z\ny\nx\nw\nv\nu\nt\ns\nr\n";
  CHECK(error_of([&] {
          nmt::export_marian({with_vocab, dir.file("x"), other});
        }).find("is not the one the checkpoint was trained with") != std::string::npos);
  CHECK(!fs::exists(dir.file("x")));
}

TEST_CASE("average_checkpoints gives the exact element-wise mean", "[average]") {
  ScratchDir dir("nmt-average");
  nmt::RunConfig cfg = tiny_config(true, true);
  std::string a = save_tiny(dir.file("run"), cfg, 1, 10);
  std::string b = save_tiny(dir.file("run"), cfg, 2, 20);
  nmt::AveragedCheckpoint avg = nmt::average_checkpoints({a, b}, dir.file("avg"));
  CHECK(avg.step == 20);
  nmt::validate_checkpoint(avg.path);
  nmt::SafetensorsReader reader(avg.path + "/model.safetensors");
  bool exact = true;
  for (const nmt::SafetensorsTensorInfo& t : reader.tensors()) {
    std::vector<float> x = stored(a, t.name), y = stored(b, t.name), m = stored(avg.path, t.name);
    for (size_t i = 0; i < m.size(); ++i)
      exact &= m[i] == static_cast<float>((static_cast<double>(x[i]) + y[i]) / 2);
  }
  CHECK(exact);
  CHECK(reader.tensors().size() ==
        nmt::SafetensorsReader(a + "/model.safetensors").tensors().size());

  // The result is a checkpoint the decoder loads (weights only), with the newest input's state.
  auto model = tiny_model(cfg, 9);
  nmt::LoadedCheckpoint ck = nmt::load_model_weights(avg.path, model->params());
  CHECK(ck.state.step == 20);
  CHECK(!ck.has_optimizer);
  CHECK(!ck.metric);
  CHECK(ck.state.extra["averaged_from"] == nlohmann::json::array({a, b}));

  SECTION("one checkpoint averages to itself, bit for bit") {
    nmt::AveragedCheckpoint one = nmt::average_checkpoints({a}, dir.file("one"));
    for (const nmt::SafetensorsTensorInfo& t : reader.tensors()) {
      std::vector<float> x = stored(a, t.name), y = stored(one.path, t.name);
      CHECK(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
    }
  }
  SECTION("latest_checkpoints picks the newest N, oldest first") {
    std::string c = save_tiny(dir.file("run"), cfg, 3, 30);
    CHECK(nmt::latest_checkpoints(dir.file("run"), 2) == std::vector<std::string>{b, c});
    CHECK(error_of([&] { nmt::latest_checkpoints(dir.file("run"), 4); }).find("fewer than") !=
          std::string::npos);
  }
  SECTION("an input naming a vocabulary by path that has changed since is refused") {
    const std::string vocab = write_piece_vocab(dir);
    std::string old = save_tiny(dir.file("old"), cfg, 4, 40, vocab);
    // As a checkpoint of an older build records it: the path and its checksum, no copy inside.
    nlohmann::json state = nlohmann::json::parse(std::ifstream(old + "/state.json"));
    const std::string copy = state["vocab"]["file"].get<std::string>();
    fs::remove(old + "/" + copy);
    state["vocab"].erase("file");
    if (state.contains("files")) state["files"].erase(copy);
    std::ofstream(old + "/state.json") << state.dump(2) << "\n";
    std::ofstream(vocab, std::ios::app) << "extra\n";  // the file at the path changes afterwards
    CHECK(error_of([&] {
            nmt::average_checkpoints({old}, dir.file("y"));
          }).find("has changed since it was saved") != std::string::npos);
    CHECK(!fs::exists(dir.file("y")));
  }
  SECTION("another model, a missing input or an existing output is refused") {
    std::string wide = save_tiny(dir.file("wide"), tiny_config(true, true, 32), 1, 30);
    std::string message = error_of([&] { nmt::average_checkpoints({a, wide}, dir.file("x")); });
    CHECK(message.find("model.ffn_dim") != std::string::npos);
    CHECK(error_of([&] {
            nmt::average_checkpoints({a, dir.file("nope")}, dir.file("x"));
          }).find("nope") != std::string::npos);
    CHECK(error_of([&] { nmt::average_checkpoints({a}, avg.path); }).find("exists") !=
          std::string::npos);
    CHECK(error_of([&] { nmt::average_checkpoints({}, dir.file("x")); }).find("no checkpoints") !=
          std::string::npos);
    CHECK(!fs::exists(dir.file("x")));
  }
}
