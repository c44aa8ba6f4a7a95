// safetensors: our writer and reader round trip; the Python `safetensors` package reads what we
// write (model.safetensors of a real checkpoint) and we read what it writes; every malformed or
// truncated file is an error naming it; CRC32C known answers.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "data/crc32c.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/model/transformer.h"
#include "test/checkpoint/python_oracle.h"
#include "test/support/catch.h"

using nmt::test::error_of;
using nmt::test::ScratchDir;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A file with header text `header` (unpadded) followed by `data_bytes` zero bytes.
std::string handmade(const std::string& header, size_t data_bytes) {
  std::string file(8, '\0');
  uint64_t n = header.size();
  std::memcpy(file.data(), &n, 8);
  return file + header + std::string(data_bytes, '\0');
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("safetensors round trip keeps names, shapes, metadata and every bit", "[checkpoint]") {
  ScratchDir dir("nmt-st");
  std::vector<float> a = {1.0f, -0.0f, 3.5e-42f /* denormal */, 1e30f, -2.25f, 0.1f};
  float scalar = 42.0f;
  std::vector<nmt::SafetensorsTensor> tensors = {
      {"layer.weight", {2, 3}, a.data()}, {"empty", {0, 3}, nullptr}, {"scalar", {}, &scalar}};
  std::string path = dir.path() + "/t.safetensors";
  nmt::SafetensorsFileInfo info = nmt::write_safetensors(path, tensors, {{"k", "v"}});
  REQUIRE(std::filesystem::file_size(path) == info.bytes);
  std::string bytes = read_bytes(path);
  CHECK(nmt::crc32c(bytes.data(), bytes.size()) == info.crc32c);
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  CHECK((8 + header_size) % 8 == 0);  // data section 8-byte aligned
  CHECK(bytes[8] == '{');

  nmt::SafetensorsReader reader(path);
  CHECK(reader.metadata() == std::map<std::string, std::string>{{"k", "v"}});
  REQUIRE(reader.tensors().size() == 3);
  const nmt::SafetensorsTensorInfo* w = reader.find("layer.weight");
  REQUIRE(w);
  CHECK(w->dtype == "F32");
  CHECK(w->shape == std::vector<int64_t>{2, 3});
  std::vector<float> back(6);
  reader.read_f32("layer.weight", {2, 3}, back.data());
  for (size_t i = 0; i < a.size(); ++i) CHECK(same_bits(a[i], back[i]));
  float scalar_back = 0;
  reader.read_f32("scalar", {}, &scalar_back);
  CHECK(scalar_back == 42.0f);
  CHECK(reader.find("empty")->numel() == 0);
  CHECK(error_of([&] {
          reader.read_f32("layer.weight", {3, 2}, back.data());
        }).find("expected [3, 2]") != std::string::npos);
  CHECK(error_of([&] { reader.read_f32("nope", {1}, back.data()); }).find("'nope'") !=
        std::string::npos);
  // No temporary file is left beside the output.
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), {}) == 1);
}

TEST_CASE("the Python safetensors package reads our model.safetensors and we read its files",
          "[checkpoint][python]") {
  ScratchDir dir("nmt-st-py");
  nmt::RunConfig cfg;
  cfg.model.encoder_layers = cfg.model.decoder_layers = 1;
  cfg.model.d_model = 8;
  cfg.model.num_heads = 2;
  cfg.model.ffn_dim = 16;
  nmt::ModelShape shape;
  shape.vocab = 11;
  shape.d_model = 8;
  shape.heads = 2;
  shape.ffn_dim = 16;
  shape.encoder_layers = shape.decoder_layers = 1;
  nmt::Transformer model(shape, nmt::Device::cpu, 16, 8);
  model.params().initialize(7);
  nmt::CheckpointState state;
  state.step = 3;
  nmt::SavedCheckpoint saved =
      nmt::save_checkpoint(dir.path() + "/ckpts", model.params(), {}, {}, state, cfg, 0);

  nlohmann::json seen =
      nmt::test::run_python_oracle("test/checkpoint/read_safetensors.py",
                                   "--read " + saved.path + "/model.safetensors", dir.path());
  const nmt::ParamStore& params = model.params();
  REQUIRE(seen["tensors"].size() == params.params().size());
  CHECK(!seen["tensors"].contains("decoder.embed_tokens.weight"));  // shared: stored once
  for (const nmt::Param& p : params.params()) {
    INFO(p.name);
    REQUIRE(seen["tensors"].contains(p.name));
    const nlohmann::json& t = seen["tensors"][p.name];
    CHECK(t["dtype"] == "float32");
    CHECK(t["shape"].get<std::vector<int64_t>>() == p.shape);
    std::vector<double> values = t["values"].get<std::vector<double>>();
    REQUIRE(static_cast<int64_t>(values.size()) == p.numel);
    const float* ours = p.value.f32();
    int64_t differing = 0;
    for (int64_t i = 0; i < p.numel; ++i)
      differing += !same_bits(static_cast<float>(values[i]), ours[i]);
    CHECK(differing == 0);
  }
  nlohmann::json aliases = nlohmann::json::parse(seen["metadata"]["aliases"].get<std::string>());
  CHECK(aliases["decoder.embed_tokens.weight"] == "encoder.embed_tokens.weight");
  CHECK(aliases["decoder.output_projection.weight"] == "encoder.embed_tokens.weight");
  CHECK(seen["metadata"]["format"] == "pt");

  std::string theirs = dir.path() + "/theirs.safetensors";
  nmt::test::run_python_oracle("test/checkpoint/read_safetensors.py", "--write " + theirs,
                               dir.path());
  nmt::SafetensorsReader reader(theirs);
  CHECK(reader.metadata().at("who") == "python");
  CHECK(reader.find("b")->dtype == "I64");
  std::vector<float> a(6);
  reader.read_f32("a", {2, 3}, a.data());
  CHECK(a == std::vector<float>{0, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f});
  CHECK(error_of([&] { reader.read_f32("b", {4}, a.data()); }).find("is I64, expected F32") !=
        std::string::npos);
}

TEST_CASE("malformed safetensors files are errors naming the file and the tensor", "[checkpoint]") {
  ScratchDir dir("nmt-st-bad");
  std::string path = dir.path() + "/bad.safetensors";
  auto error_for = [&](const std::string& bytes) {
    write_bytes(path, bytes);
    return error_of([&] { nmt::SafetensorsReader reader(path); });
  };
  const std::string entry = R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  struct Case {
    const char* what;
    std::string bytes;
    const char* expected;
  };
  std::vector<Case> cases = {
      {"too short", std::string(5, '\0'), "file too short"},
      {"header beyond the file", handmade("{" + entry + "}", 8).substr(0, 20), "beyond the end"},
      {"bad JSON", handmade("{\"x\": [1, 2", 0), "not valid JSON"},
      {"not an object", handmade("[1,2]", 0), "not a JSON object"},
      {"truncated data", handmade("{" + entry + "}", 4), "tensor 'x'"},
      {"bytes do not match the shape",
       handmade(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "needs 12 bytes"},
      {"unknown dtype", handmade(R"({"x":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", 8),
       "unknown dtype 'F33'"},
      {"overlap",
       handmade("{" + entry + R"(,"y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
       "overlap"},
      {"gap", handmade(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8), "gap"},
      {"trailing bytes", handmade("{" + entry + "}", 12), "follow the last tensor"},
      {"negative offset", handmade(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", 8),
       "data_offsets"},
      {"metadata not strings", handmade(R"({"__metadata__":{"a":1}})", 0), "not a string"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    std::string message = error_for(c.bytes);
    CHECK(message.find(path) != std::string::npos);
    CHECK(message.find(c.expected) != std::string::npos);
  }
  CHECK(error_of([&] {
          nmt::SafetensorsReader reader(dir.path() + "/missing.safetensors");
        }).find("missing.safetensors") != std::string::npos);
  // A valid handmade file passes (the cases above fail for their own reason only).
  CHECK(error_for(handmade("{" + entry + "}", 8)).empty());
}

TEST_CASE("writing safetensors into a missing directory is an error naming it", "[checkpoint]") {
  float x = 1;
  std::string message = error_of([&] {
    nmt::write_safetensors("/nonexistent-dir-nmt/x.safetensors", {{"x", {1}, &x}}, {});
  });
  CHECK(message.find("/nonexistent-dir-nmt/x.safetensors") != std::string::npos);
  CHECK(error_of([&] {
          nmt::write_safetensors("/tmp/never.safetensors", {{"x", {1}, &x}, {"x", {1}, &x}}, {});
        }).find("given twice") != std::string::npos);
}

TEST_CASE("CRC32C matches the known answers, in hardware and in software", "[checkpoint]") {
  const std::string digits = "123456789";
  CHECK(nmt::crc32c(digits.data(), digits.size()) == 0xE3069283u);
  std::string zeros(32, '\0'), ones(32, '\xff');
  CHECK(nmt::crc32c(zeros.data(), zeros.size()) == 0x8A9136AAu);  // RFC 3720 B.4
  CHECK(nmt::crc32c(ones.data(), ones.size()) == 0x62A8AB43u);
  std::mt19937 rng(5);
  std::string data(1000, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  for (size_t n : {0, 1, 7, 8, 9, 63, 64, 999, 1000}) {
    INFO(n);
    uint32_t whole = nmt::crc32c(data.data(), n);
    CHECK(whole == nmt::detail::crc32c_software(data.data(), n, 0));
    size_t half = n / 3;
    CHECK(nmt::crc32c(data.data() + half, n - half, nmt::crc32c(data.data(), half)) == whole);
  }
  CHECK(nmt::crc32c_hex(0xE3069283u) == "0xe3069283");
}
