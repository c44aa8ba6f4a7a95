// MetricsLog: an O_APPEND file descriptor written one whole line per write(2).
#include "engine/report/metrics_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace nmt {

MetricsLog::MetricsLog(const std::string& path, Mode mode) : path_(path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (mode == Mode::truncate ? O_TRUNC : 0);
  fd_ = ::open(path.c_str(), flags, 0644);
  if (fd_ < 0) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsLog::write(const nlohmann::json& record) {
  if (!record.is_object())
    throw std::invalid_argument("MetricsLog " + path_ + ": a record must be a JSON object, not " +
                                std::string(record.type_name()));
  // replace: a string holding invalid UTF-8 (a corrupt sample) must not abort the run.
  std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("cannot write " + path_ + ": " + std::strerror(errno));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace nmt
