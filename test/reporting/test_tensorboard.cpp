// TensorBoard events written by us and read back by TensorBoard's own EventAccumulator; the
// protobuf and TFRecord encodings against hand-computed bytes.
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "data/crc32c.h"
#include "engine/report/tensorboard.h"
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
