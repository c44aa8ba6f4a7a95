// TensorBoard events: protobuf wire format by hand (engine/report/protobuf_wire.h) inside TFRecord
// frames with masked CRC32C. Each summary event holds one value.
//   Event   (tensorflow/core/util/event.proto): wall_time = 1 (double), step = 2 (int64),
//           file_version = 3 (string), summary = 5 (Summary)
//   Summary (tensorflow/core/framework/summary.proto): value = 1 (repeated Value);
//   Value: tag = 1 (string), simple_value = 2 (float); the plugins' values (text, hparams) in
//   engine/report/tensorboard_plugins.cpp
#include "engine/report/tensorboard.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "data/crc32c.h"
#include "engine/report/protobuf_wire.h"
#include "engine/report/tensorboard_plugins.h"

namespace nmt {
namespace tensorboard_detail {

using protobuf_wire::put_bytes;
using protobuf_wire::put_double;
using protobuf_wire::put_float;
using protobuf_wire::put_le32;
using protobuf_wire::put_le64;
using protobuf_wire::put_varint_field;

std::string encode_file_version_event(double wall_time) {
  std::string event;
  put_double(event, 1, wall_time);
  put_bytes(event, 3, "brain.Event:2");
  return event;
}

std::string encode_summary_event(double wall_time, int64_t step, const std::string& value) {
  std::string summary;
  put_bytes(summary, 1, value);
  std::string event;
  put_double(event, 1, wall_time);
  put_varint_field(event, 2, static_cast<uint64_t>(step));  // int64: negative steps take ten bytes
  put_bytes(event, 5, summary);
  return event;
}

std::string encode_scalar_event(double wall_time, int64_t step, const std::string& tag,
                                float value) {
  std::string summary_value;
  put_bytes(summary_value, 1, tag);
  put_float(summary_value, 2, value);
  return encode_summary_event(wall_time, step, summary_value);
}

std::string frame_record(const std::string& data) {
  std::string frame;
  put_le64(frame, data.size());
  put_le32(frame, masked_crc32c(frame.data(), 8));
  frame += data;
  put_le32(frame, masked_crc32c(data.data(), data.size()));
  return frame;
}

}  // namespace tensorboard_detail

namespace {

double unix_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw std::runtime_error("cannot create the TensorBoard log directory " + dir + ": " +
                             (ec ? ec.message() : std::string("a file of that name exists")));
  double now = unix_time_now();
  std::string base =
      dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." + host_name();
  path_ = base;
  // Two writers started in the same second on one host (a restart) must not share a file.
  for (int n = 0; std::filesystem::exists(path_); ++n) {
    path_ = base;
    path_.append(".").append(std::to_string(::getpid()));
    if (n > 0) path_.append(".").append(std::to_string(n));
  }
  file_ = std::fopen(path_.c_str(), "wbx");
  if (!file_) throw std::runtime_error("cannot create " + path_ + ": " + std::strerror(errno));
  write_record(tensorboard_detail::encode_file_version_event(now));
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  write_record(tensorboard_detail::encode_scalar_event(unix_time_now(), step, tag,
                                                       static_cast<float>(value)));
}

void TensorBoardWriter::add_text(const std::string& tag, const std::string& markdown,
                                 int64_t step) {
  write_record(tensorboard_detail::encode_summary_event(
      unix_time_now(), step, tensorboard_detail::text_summary_value(tag, markdown)));
}

void TensorBoardWriter::add_hparams(const std::vector<HParam>& hparams,
                                    const std::vector<std::string>& metric_tags, int64_t step) {
  double now = unix_time_now();
  write_record(tensorboard_detail::encode_summary_event(
      now, step, tensorboard_detail::hparams_experiment_value(hparams, metric_tags, now)));
  write_record(tensorboard_detail::encode_summary_event(
      now, step, tensorboard_detail::hparams_session_start_value(hparams, now)));
}

void TensorBoardWriter::write_record(const std::string& event) {
  std::string frame = tensorboard_detail::frame_record(event);
  if (std::fwrite(frame.data(), 1, frame.size(), file_) != frame.size())
    throw std::runtime_error("cannot write " + path_ + ": " + std::strerror(errno));
}

void TensorBoardWriter::flush() {
  if (std::fflush(file_) != 0)
    throw std::runtime_error("cannot write " + path_ + ": " + std::strerror(errno));
}

}  // namespace nmt
