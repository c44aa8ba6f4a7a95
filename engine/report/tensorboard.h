// TensorBoardWriter: a TensorBoard events file (TFRecord framing of Event protocol buffers,
// encoded by hand) with scalar summaries, text summaries (the text dashboard renders them as
// Markdown) and a run's hyperparameters (the hparams dashboard), readable by TensorBoard and its
// EventAccumulator.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace nmt {

// One hyperparameter of a run for the hparams dashboard: a number, a boolean or a string.
struct HParam {
  enum class Kind { number, boolean, text };
  std::string name;  // e.g. "model.d_model"
  Kind kind = Kind::number;
  double number = 0;
  bool boolean = false;
  std::string text;
};

class TensorBoardWriter {
 public:
  // Creates `dir` if needed and a new file `events.out.tfevents.<unix time>.<host>` in it (with
  // ".<pid>" appended should that name exist), whose first record is the file version. Throws
  // std::runtime_error naming the path when it cannot.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One Event {wall_time, step, summary {value {tag, simple_value}}}. Every add_ is buffered until
  // flush().
  void add_scalar(const std::string& tag, double value, int64_t step);
  // One Event {wall_time, step, summary {value {tag, metadata (plugin "text"), tensor (a scalar
  // string)}}}: what tf.summary.text writes; TensorBoard's text dashboard renders it as Markdown.
  void add_text(const std::string& tag, const std::string& markdown, int64_t step);
  // The hparams plugin's two summaries, as TensorBoard's hparams API writes them: the experiment
  // (each hyperparameter's name and type; `metric_tags`, scalar tags of this run whose last value
  // the dashboard shows as the session's metrics) and this session's start (the values).
  void add_hparams(const std::vector<HParam>& hparams, const std::vector<std::string>& metric_tags,
                   int64_t step);
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
// An Event {wall_time, step, summary {value}} around one encoded Summary.Value.
std::string encode_summary_event(double wall_time, int64_t step, const std::string& value);
std::string encode_scalar_event(double wall_time, int64_t step, const std::string& tag,
                                float value);
std::string frame_record(const std::string& data);
}  // namespace tensorboard_detail

}  // namespace nmt
