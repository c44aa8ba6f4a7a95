// nmt-prep's progress helpers: the encoding line, flag renaming in SentencePiece's messages, a
// heartbeat thread and the capture of file descriptor 2 (SentencePiece writes its log there).
#include "data/prep_progress.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <regex>
#include <utility>

namespace nmt {

std::string format_encode_progress(const std::string& split, int64_t done, int64_t total,
                                   double seconds) {
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
  const double eta = rate > 0 ? static_cast<double>(total - done) / rate : 0.0;
  char line[200];
  std::snprintf(line, sizeof line,
                "nmt-prep: encoding %s: %lld/%lld pairs | %.0f lines/s | eta %.0f s", split.c_str(),
                static_cast<long long>(done), static_cast<long long>(total), rate, eta);
  return line;
}

std::string name_prep_flags(const std::string& sentencepiece_text) {
  // SentencePiece's spellings: "vocab_size", "--vocab_size", "trainer_spec.vocab_size()".
  static const std::pair<std::regex, const char*> kFlags[] = {
      {std::regex(R"((--|trainer_spec(_)?\.)?\bvocab_size\b(\(\))?)"), "--vocab-size"},
      {std::regex(R"((--|trainer_spec(_)?\.)?\bcharacter_coverage\b(\(\))?)"),
       "--character-coverage"},
      {std::regex(R"((--|trainer_spec(_)?\.)?\binput_sentence_size\b(\(\))?)"),
       "--input-sentence-size"},
      {std::regex(R"((--|trainer_spec(_)?\.)?\bnum_threads\b(\(\))?)"), "--threads"},
  };
  // A SentencePiece flag left (underscores: ours have hyphens) is one nmt-prep does not expose.
  static const std::regex kOtherFlag(R"((--[a-z]+(_[a-z]+)+)(=<[a-z]+>)?( flag)?)");
  std::string text = sentencepiece_text;
  for (const auto& [pattern, flag] : kFlags) text = std::regex_replace(text, pattern, flag);
  return std::regex_replace(text, kOtherFlag, "$& (a SentencePiece flag nmt-prep does not set)");
}

Heartbeat::Heartbeat(double interval_seconds, std::function<void(double)> beat) {
  const auto start = std::chrono::steady_clock::now();
  // At least a millisecond: a zero interval would spin.
  const auto interval = std::chrono::duration<double>(std::max(interval_seconds, 1e-3));
  thread_ = std::thread([this, start, interval, beat = std::move(beat)] {
    std::unique_lock<std::mutex> lock(mutex_);
    auto next = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(interval);
    while (!wake_.wait_until(lock, next, [this] { return stop_; })) {
      beat(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(interval);
    }
  });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

namespace {

void write_all(int fd, const std::string& text) {
  for (size_t written = 0; written < text.size();) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere left to say it
    written += static_cast<size_t>(n);
  }
}

}  // namespace

namespace {

// The capture alive now (one at a time), for the exit hook below.
std::atomic<StderrCapture*> active_capture{nullptr};

// A library that ends the process with exit() while a capture lives (SentencePiece's LOG(FATAL))
// skips its destructor: without this its last message would stay unread in the pipe.
void finish_capture_at_exit() {
  if (StderrCapture* capture = active_capture.exchange(nullptr)) capture->finish();
}

}  // namespace

StderrCapture::StderrCapture(std::function<std::string(const std::string&)> rewrite) {
  static const bool hook_registered = std::atexit(finish_capture_at_exit) == 0;
  (void)hook_registered;
  int fds[2];
  std::fflush(stderr);
  if (::pipe2(fds, O_CLOEXEC) != 0) return;
  saved_fd_ = ::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 0);
  if (saved_fd_ < 0 || ::dup2(fds[1], STDERR_FILENO) < 0) {
    if (saved_fd_ >= 0) ::close(saved_fd_);
    saved_fd_ = -1;
    ::close(fds[0]);
    ::close(fds[1]);
    return;
  }
  ::close(fds[1]);  // fd 2 is now the only writer: restoring it ends the reader
  read_fd_ = fds[0];
  reader_ = std::thread([in = read_fd_, out = saved_fd_, rewrite = std::move(rewrite)] {
    std::string pending;
    char buffer[4096];
    for (ssize_t n; (n = ::read(in, buffer, sizeof buffer)) != 0;) {
      if (n < 0) {
        if (errno == EINTR) continue;
        break;
      }
      pending.append(buffer, static_cast<size_t>(n));
      for (size_t end; (end = pending.find('\n')) != std::string::npos;) {
        write_all(out, rewrite(pending.substr(0, end)) + "\n");
        pending.erase(0, end + 1);
      }
    }
    if (!pending.empty()) write_all(out, rewrite(pending) + "\n");
  });
  active_capture.store(this);
}

StderrCapture::~StderrCapture() {
  StderrCapture* self = this;
  active_capture.compare_exchange_strong(self, nullptr);
  finish();
}

void StderrCapture::finish() {
  if (saved_fd_ < 0) return;
  std::fflush(stderr);
  std::cerr.flush();
  ::dup2(saved_fd_, STDERR_FILENO);  // closes the pipe's last write end: the reader sees EOF
  reader_.join();
  ::close(read_fd_);
  ::close(saved_fd_);
  saved_fd_ = read_fd_ = -1;
}

}  // namespace nmt
