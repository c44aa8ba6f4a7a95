// TensorBoard events written by us and read back by TensorBoard's own EventAccumulator and its
// text and hparams plugins; the protobuf and TFRecord encodings against hand-computed bytes.
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "data/crc32c.h"
#include "engine/report/tensorboard.h"
#include "engine/report/tensorboard_plugins.h"
#include "test/checkpoint/python_oracle.h"
#include "test/support/catch.h"

using nmt::test::ScratchDir;

TEST_CASE("TensorBoard's EventAccumulator reads our scalars: tags, steps and values",
          "[reporting][python]") {
  ScratchDir dir("nmt-tb");
  double before =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string log_dir = dir.path() + "/logs";
  {
    nmt::TensorBoardWriter writer(log_dir);
    CHECK(writer.path().find(log_dir + "/events.out.tfevents.") == 0);
    for (int64_t step = 10; step <= 50; step += 10) {
      writer.add_scalar("train/loss", 10.0 / static_cast<double>(step), step);
      writer.add_scalar("train/lr", 1e-4 * static_cast<double>(step), step);
    }
    writer.add_scalar("dev/bleu", 27.5, 50);
    writer.add_scalar("big/step", -1.0, int64_t{1} << 40);
    writer.flush();
  }
  nlohmann::json seen =
      nmt::test::run_python_oracle("test/reporting/read_events.py", log_dir, dir.path());
  INFO(seen.dump());
  const nlohmann::json& scalars = seen["scalars"];
  CHECK(scalars.size() == 4);
  REQUIRE(scalars.contains("train/loss"));
  REQUIRE(scalars["train/loss"].size() == 5);
  for (int i = 0; i < 5; ++i) {
    int64_t step = 10 * (i + 1);
    CHECK(scalars["train/loss"][i][0] == step);
    CHECK(scalars["train/loss"][i][1].get<double>() ==
          static_cast<double>(static_cast<float>(10.0 / static_cast<double>(step))));
    CHECK(scalars["train/lr"][i][1].get<double>() ==
          static_cast<double>(static_cast<float>(1e-4 * static_cast<double>(step))));
    CHECK(scalars["train/loss"][i][2].get<double>() >= before - 1);
  }
  CHECK(scalars["dev/bleu"][0][0] == 50);
  CHECK(scalars["dev/bleu"][0][1] == 27.5);
  CHECK(scalars["big/step"][0][0] == int64_t{1} << 40);
  // EventAccumulator keeps the number after "brain.Event:" of the first record.
  CHECK(seen["file_version"] == 2.0);
}

TEST_CASE("TensorBoard reads our sample translations as text and the config as hparams",
          "[reporting][python]") {
  ScratchDir dir("nmt-tb-plugins");
  std::string log_dir = dir.path() + "/logs";
  nlohmann::json config = {
      {"model", {{"d_model", 512}, {"norm", "pre"}, {"shared_embeddings", false}}},
      {"train", {{"batch_tokens", 4096}, {"clip_norm", 0.0}, {"max_time", nullptr}}},
      {"lr_schedule", {{"learning_rate", 7e-4}, {"policy", "inverse_sqrt"}}},
      {"data", {{"train", "runs/prep/\xc3\xa9t\xc3\xa9"}, {"lengths", {16, 32}}}},
  };
  // Markdown and HTML in the sentences show as text; bad UTF-8 becomes U+FFFD.
  std::vector<std::vector<std::string>> first = {
      {"a | b", "x*y_z `code` [link](u)", "<b>bold</b> &lt; back\\slash"},
      {"two\nlines", "caf\xc3\xa9", "bad \xff byte"}};
  std::vector<std::vector<std::string>> second = {{"hello", "hola", "hola"}};
  {
    nmt::TensorBoardWriter writer(log_dir);
    writer.add_hparams(nmt::hparams_from_json(config), {"eval/bleu", "eval/loss"}, 0);
    for (int64_t step = 10; step <= 20; step += 10) {
      writer.add_scalar("train/loss", 10.0 / static_cast<double>(step), step);
      writer.add_scalar("eval/bleu", static_cast<double>(step) + 2.5, step);
      writer.add_scalar("eval/loss", 3.0 - static_cast<double>(step) / 10, step);
      writer.add_text("eval/samples", nmt::samples_markdown(step == 10 ? first : second), step);
    }
    writer.flush();
  }
  nlohmann::json seen =
      nmt::test::run_python_oracle("test/reporting/read_events.py", log_dir, dir.path());
  INFO(seen.dump(1));
  // The scalars read as before, beside the plugins' tags.
  const nlohmann::json& scalars = seen["scalars"];
  CHECK(scalars.size() == 3);
  REQUIRE(scalars["train/loss"].size() == 2);
  CHECK(scalars["train/loss"][1][0] == 20);
  CHECK(scalars["train/loss"][1][1] == 0.5);
  CHECK(seen["plugins"]["text"] == nlohmann::json::array({"eval/samples"}));
  CHECK(seen["plugins"]["hparams"] ==
        nlohmann::json::array({"_hparams_/experiment", "_hparams_/session_start_info"}));

  // The text: the Markdown we wrote, per evaluation, and the text dashboard's HTML table of it.
  const nlohmann::json& texts = seen["texts"]["eval/samples"];
  REQUIRE(texts.size() == 2);
  CHECK(texts[0][0] == 10);
  CHECK(texts[0][1] == nmt::samples_markdown(first));
  CHECK(texts[1][0] == 20);
  CHECK(texts[1][1] ==
        "| source | reference | prediction |\n|---|---|---|\n| hello | hola | hola |\n");
  std::string html = seen["text_html"]["eval/samples"][0];
  CHECK(html.find("<table>") != std::string::npos);
  CHECK(html.find("<th>prediction</th>") != std::string::npos);
  for (const char* cell :
       {"<td>a | b</td>", "<td>x*y_z `code` [link](u)</td>",
        "<td>&lt;b&gt;bold&lt;/b&gt; &amp;lt; back\\slash</td>", "<td>two lines</td>",
        "<td>caf\xc3\xa9</td>", "<td>bad \xef\xbf\xbd byte</td>"}) {
    INFO(cell);
    CHECK(html.find(cell) != std::string::npos);
  }

  // The hparams: the flattened config with its types, the metrics, and what the dashboard shows.
  const nlohmann::json& values = seen["hparams"]["session_start_info"]["hparams"];
  CHECK(values == nlohmann::json({{"model.d_model", 512.0},
                                  {"model.norm", "pre"},
                                  {"model.shared_embeddings", false},
                                  {"train.batch_tokens", 4096.0},
                                  {"train.clip_norm", 0.0},
                                  {"lr_schedule.learning_rate", 7e-4},
                                  {"lr_schedule.policy", "inverse_sqrt"},
                                  {"data.train", "runs/prep/\xc3\xa9t\xc3\xa9"},
                                  {"data.lengths", "[16,32]"}}));
  const nlohmann::json& experiment = seen["hparams"]["experiment"];
  nlohmann::json types;
  for (const nlohmann::json& info : experiment["hparamInfos"]) types[info["name"]] = info["type"];
  CHECK(types.size() == 9);
  CHECK(types["model.d_model"] == "DATA_TYPE_FLOAT64");
  CHECK(types["model.norm"] == "DATA_TYPE_STRING");
  CHECK(types["model.shared_embeddings"] == "DATA_TYPE_BOOL");
  REQUIRE(experiment["metricInfos"].size() == 2);
  CHECK(experiment["metricInfos"][0]["name"]["tag"] == "eval/bleu");
  CHECK(experiment["metricInfos"][1]["name"]["tag"] == "eval/loss");
  // The hparams plugin's own answer: one session, its hyperparameters and final metrics.
  const nlohmann::json& session = seen["dashboard"]["sessions"];
  REQUIRE(session.size() == 1);
  CHECK(session[0]["hparams"]["model.d_model"] == 512.0);
  CHECK(session[0]["hparams"]["model.shared_embeddings"] == false);
  CHECK(session[0]["metrics"]["eval/bleu"] == 22.5);
  CHECK(session[0]["metrics"]["eval/loss"] == 1.0);
}

TEST_CASE("sample tables and flattened configs from odd input", "[reporting]") {
  CHECK(nmt::samples_markdown({}).empty());
  // A short row gets empty cells; extra entries are dropped.
  CHECK(nmt::samples_markdown({{"only source"}, {"s", "r", "p", "extra"}}) ==
        "| source | reference | prediction |\n|---|---|---|\n| only source |  |  |\n"
        "| s | r | p |\n");
  CHECK(nmt::samples_markdown({{}}).find("|  |  |  |") != std::string::npos);
  std::string nul("a\0b", 3);  // a NUL byte is no Markdown character
  CHECK(nmt::samples_markdown({{nul, "r", "p"}}).find("| " + nul + " | r | p |") !=
        std::string::npos);
  CHECK(nmt::hparams_from_json(nlohmann::json::array({1, 2})).empty());
  CHECK(nmt::hparams_from_json(42).empty());
  CHECK(nmt::hparams_from_json(nlohmann::json::object()).empty());
  std::vector<nmt::HParam> h =
      nmt::hparams_from_json({{"a", {{"b", {{"c", true}}}}}, {"n", nullptr}});
  REQUIRE(h.size() == 1);
  CHECK(h[0].name == "a.b.c");
  CHECK(h[0].kind == nmt::HParam::Kind::boolean);
  CHECK(h[0].boolean);
  CHECK(nmt::valid_utf8("ok \xc3\xa9") == "ok \xc3\xa9");
  CHECK(nmt::valid_utf8("\xc3") == "\xef\xbf\xbd");
  CHECK(nmt::valid_utf8("a\x80\x80"
                        "b") ==
        "a\xef\xbf\xbd\xef\xbf\xbd"
        "b");
}

TEST_CASE("two TensorBoard writers in one directory and second get separate files", "[reporting]") {
  ScratchDir dir("nmt-tb-two");
  nmt::TensorBoardWriter a(dir.path()), b(dir.path());
  CHECK(a.path() != b.path());
  CHECK(std::filesystem::exists(a.path()));
  CHECK(std::filesystem::exists(b.path()));
}

TEST_CASE("Event protobuf and TFRecord bytes are as specified", "[reporting]") {
  std::string event = nmt::tensorboard_detail::encode_scalar_event(1.5, 300, "ab", 2.0f);
  // Event: 0x09 wall_time(fixed64) | 0x10 step(varint 300 = ac 02) | 0x2a summary(len)
  //   Summary: 0x0a value(len) | Value: 0x0a tag "ab" | 0x15 simple_value(fixed32)
  std::string expected = "\x09";
  double wall = 1.5;
  expected.append(reinterpret_cast<const char*>(&wall), 8);
  expected += "\x10\xac\x02";
  std::string value =
      "\x0a\x02"
      "ab\x15";
  float two = 2.0f;
  value.append(reinterpret_cast<const char*>(&two), 4);
  std::string summary = "\x0a";
  summary.push_back(static_cast<char>(value.size()));
  summary += value;
  expected.push_back('\x2a');
  expected.push_back(static_cast<char>(summary.size()));
  expected += summary;
  CHECK(event == expected);

  std::string frame = nmt::tensorboard_detail::frame_record("xyz");
  REQUIRE(frame.size() == 8 + 4 + 3 + 4);
  uint64_t length = 0;
  std::memcpy(&length, frame.data(), 8);
  CHECK(length == 3);
  uint32_t length_crc = 0, data_crc = 0;
  std::memcpy(&length_crc, frame.data() + 8, 4);
  std::memcpy(&data_crc, frame.data() + 15, 4);
  CHECK(length_crc == nmt::masked_crc32c(frame.data(), 8));
  CHECK(data_crc == nmt::masked_crc32c("xyz", 3));
  uint32_t plain = nmt::crc32c("xyz", 3);
  CHECK(data_crc == ((plain >> 15) | (plain << 17)) + 0xa282ead8u);
}

TEST_CASE("text and hparams Summary.Value bytes are as specified", "[reporting]") {
  // Value: 0x0a tag | 0x4a metadata {0x0a plugin_data {0x0a "text"}} | 0x42 tensor {0x08 dtype 7
  //   (DT_STRING) | 0x12 shape {} | 0x42 string_val}
  std::string text = nmt::tensorboard_detail::text_summary_value("t", "hi");
  CHECK(text ==
        std::string("\x0a\x01t\x4a\x08\x0a\x06\x0a\x04text\x42\x08\x08\x07\x12\x00\x42\x02hi", 23));
  // SessionStartInfo with one boolean false: the oneof member is written although it is 0.
  nmt::HParam flag;
  flag.name = "f";
  flag.kind = nmt::HParam::Kind::boolean;
  std::string start = nmt::tensorboard_detail::hparams_session_start_value({flag}, 0.0);
  // ... plugin_data content: 0x1a session_start_info {0x0a entry {0x0a "f" | 0x12 {0x20 0x00}}
  //   | 0x29 start_time_secs}
  std::string entry("\x0a\x07\x0a\x01\x66\x12\x02\x20\x00", 9);
  CHECK(start.find(entry) != std::string::npos);
  CHECK(start.find("_hparams_/session_start_info") != std::string::npos);
}

TEST_CASE("a TensorBoard writer in an unusable directory is an error naming it", "[reporting]") {
  ScratchDir dir("nmt-tb-bad");
  std::ofstream(dir.path() + "/file") << "x";
  try {
    nmt::TensorBoardWriter writer(dir.path() + "/file/logs");
    FAIL("no error");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).find(dir.path() + "/file/logs") != std::string::npos);
  }
}
