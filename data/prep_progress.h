// What nmt-prep says while its long phases run: encoding progress (pairs, lines/s, ETA), a
// heartbeat while SentencePiece trains, and SentencePiece's own messages (its warnings on stderr,
// its errors) rewritten to name the nmt-prep flag behind each SentencePiece flag they mention.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace nmt {

// "nmt-prep: encoding train: 32768/100000 pairs | 41000 lines/s | eta 2 s" (`done` of `total`
// pairs after `seconds`; the ETA is the pairs left at the rate so far).
std::string format_encode_progress(const std::string& split, int64_t done, int64_t total,
                                   double seconds);

// SentencePiece's text with each trainer flag nmt-prep sets from one of its own options replaced
// by that option: "Increase vocab_size or decrease character_coverage with --character_coverage
// option." -> "Increase --vocab-size or decrease --character-coverage with --character-coverage
// option." (vocab_size, character_coverage, input_sentence_size, num_threads -> --threads). Other
// SentencePiece flags ("--max_sentence_length=<size> flag") get "(a SentencePiece flag nmt-prep
// does not set)" after them.
std::string name_prep_flags(const std::string& sentencepiece_text);

// Calls `beat(seconds since start)` every `interval_seconds` from its own thread until destroyed.
class Heartbeat {
 public:
  Heartbeat(double interval_seconds, std::function<void(double)> beat);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

// While it lives, what this process writes to file descriptor 2 (stderr; SentencePiece logs there
// through its own logger) is read line by line by a thread and written to the real stderr as
// rewrite(line) + "\n", in order. The destructor restores fd 2 and passes on a last unterminated
// line, as does exit() while it lives. If the pipe cannot be made, nothing is captured. One at a
// time per process.
class StderrCapture {
 public:
  explicit StderrCapture(std::function<std::string(const std::string&)> rewrite);
  ~StderrCapture();
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;
  // Restores fd 2 and passes on what is left; the destructor calls it, and so does an exit()
  // while the capture lives (a library's fatal error). Idempotent.
  void finish();

 private:
  int saved_fd_ = -1;  // the real stderr, while captured
  int read_fd_ = -1;
  std::thread reader_;
};

}  // namespace nmt
