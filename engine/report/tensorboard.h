// TensorBoardWriter: scalar summaries in a TensorBoard events file (TFRecord framing of Event
// protocol buffers, encoded by hand), readable by TensorBoard and its EventAccumulator.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace nmt {

class TensorBoardWriter {
 public:
  // Creates `dir` if needed and a new file `events.out.tfevents.<unix time>.<host>` in it (with
  // ".<pid>" appended should that name exist), whose first record is the file version. Throws
  // std::runtime_error naming the path when it cannot.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One Event {wall_time, step, summary {value {tag, simple_value}}}; buffered until flush().
  void add_scalar(const std::string& tag, double value, int64_t step);
  // Pushes buffered records to the file. Throws std::runtime_error naming it on a write error.
  void flush();

  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& event);

  std::string path_;
  std::FILE* file_ = nullptr;
};

namespace tensorboard_detail {
// Exposed for tests: the serialized Event messages and one TFRecord frame.
std::string encode_file_version_event(double wall_time);
std::string encode_scalar_event(double wall_time, int64_t step, const std::string& tag,
                                float value);
std::string frame_record(const std::string& data);
}  // namespace tensorboard_detail

}  // namespace nmt
