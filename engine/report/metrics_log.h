// MetricsLog: metrics.jsonl, one JSON object per line, appended and flushed on every call so that
// a crash loses at most the line being written and `tail -f` shows each line as it happens.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace nmt {

class MetricsLog {
 public:
  enum class Mode { append, truncate };

  // Opens `path` (its directory is created if needed); append (the default) keeps the lines of an
  // earlier run, as a resumed run wants. Throws std::runtime_error naming the path.
  explicit MetricsLog(const std::string& path, Mode mode = Mode::append);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // Appends record (a JSON object) as one line with one write(2). Non-finite numbers become null
  // (JSON has no NaN). Throws std::invalid_argument for a non-object, std::runtime_error naming
  // the file on a write error.
  void write(const nlohmann::json& record);

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace nmt
