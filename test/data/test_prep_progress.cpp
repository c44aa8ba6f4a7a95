// nmt-prep's progress inside its long phases: the encoding line (lines/s, ETA), the heartbeat while
// SentencePiece trains, SentencePiece's messages naming nmt-prep's flags, and the capture of
// stderr that passes SentencePiece's warnings on renamed.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "data/prep.h"
#include "data/prep_progress.h"
#include "test/data/data_test_util.h"
#include "test/support/catch.h"
#include "test/support/lib/scratch_dir.h"

using nmt::test::contains;
using nmt::test::error_of;
using nmt::test::head_lines;
using nmt::test::join_lines;
using nmt::test::ScratchDir;
using nmt::test::write_text;

namespace {

const std::string kBible = nmt::test::shared_data_dir() + "/bible-en-es/";

nmt::PrepOptions bible_slice(const ScratchDir& dir, size_t lines) {
  write_text(dir.file("train.en"), join_lines(head_lines(kBible + "train.en", lines)));
  write_text(dir.file("train.es"), join_lines(head_lines(kBible + "train.es", lines)));
  nmt::PrepOptions o;
  o.train_source = dir.file("train.en");
  o.train_target = dir.file("train.es");
  o.out_dir = dir.file("out");
  o.threads = 1;
  return o;
}

}  // namespace

TEST_CASE("the encoding progress line: pairs, lines/s and an ETA", "[prep][progress]") {
  CHECK(nmt::format_encode_progress("train", 30000, 120000, 2.0) ==
        "nmt-prep: encoding train: 30000/120000 pairs | 15000 lines/s | eta 6 s");
  CHECK(nmt::format_encode_progress("dev", 0, 10, 0.0) ==
        "nmt-prep: encoding dev: 0/10 pairs | 0 lines/s | eta 0 s");
}

TEST_CASE("SentencePiece's messages name nmt-prep's flags", "[prep][progress]") {
  CHECK(nmt::name_prep_flags("Vocabulary size is smaller than required_chars. 60 vs 79. Increase "
                             "vocab_size or decrease character_coverage with "
                             "--character_coverage option.") ==
        "Vocabulary size is smaller than required_chars. 60 vs 79. Increase --vocab-size or "
        "decrease --character-coverage with --character-coverage option.");
  CHECK(nmt::name_prep_flags("[trainer_spec.character_coverage() >= 0.98] (trainer_spec_.vocab_"
                             "size()) --input_sentence_size=<size> num_threads") ==
        "[--character-coverage >= 0.98] (--vocab-size) --input-sentence-size=<size> --threads");
  CHECK(nmt::name_prep_flags("The maximum length can be changed with --max_sentence_length=<size> "
                             "flag.") ==
        "The maximum length can be changed with --max_sentence_length=<size> flag (a "
        "SentencePiece flag nmt-prep does not set).");
  CHECK(nmt::name_prep_flags("nothing to rename") == "nothing to rename");
}

TEST_CASE("a heartbeat beats at its interval until destroyed", "[prep][progress]") {
  std::atomic<int> beats{0};
  std::atomic<double> last{0};
  {
    nmt::Heartbeat heartbeat(0.01, [&](double seconds) {
      last = seconds;
      ++beats;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const int seen = beats;
  CHECK(seen >= 2);
  CHECK(last >= 0.01);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  CHECK(beats == seen);  // stopped with its destructor
}

TEST_CASE("StderrCapture passes fd 2's lines on rewritten, then restores it", "[prep][progress]") {
  ScratchDir dir;
  const std::string path = dir.file("stderr.txt");
  std::fflush(stderr);
  const int saved = ::dup(STDERR_FILENO);
  const int file = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(file >= 0);
  ::dup2(file, STDERR_FILENO);
  {
    nmt::StderrCapture capture([](const std::string& line) { return "[" + line + "]"; });
    std::fprintf(stderr, "first\nsecond");
  }
  std::fprintf(stderr, "after\n");
  std::fflush(stderr);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  ::close(file);
  CHECK(nmt::test::read_text(path) == "[first]\n[second]\nafter\n");
}

TEST_CASE("prep reports progress while training and encoding", "[prep][progress]") {
  ScratchDir dir;
  nmt::PrepOptions o = bible_slice(dir, 2000);
  o.spm.vocab_size = 500;
  o.progress_interval_seconds = 0;  // every chunk; the heartbeat every millisecond
  std::ostringstream progress;
  o.progress = &progress;
  nmt::run_prep(o);
  INFO(progress.str());
  CHECK(contains(progress.str(), "nmt-prep: SentencePiece still training: "));
  CHECK(contains(progress.str(), " lines read\n"));
  CHECK(contains(progress.str(), "nmt-prep: encoding train: 2000/2000 pairs | "));
  CHECK(contains(progress.str(), " lines/s | eta 0 s\n"));
}

TEST_CASE("a SentencePiece error names nmt-prep's flag", "[prep][progress]") {
  ScratchDir dir;
  nmt::PrepOptions o = bible_slice(dir, 300);
  o.spm.vocab_size = 60;  // fewer pieces than the text has characters
  CHECK(contains(error_of([&] { nmt::run_prep(o); }), "Increase --vocab-size"));
  o.spm.vocab_size = 300;
  o.spm.character_coverage = 0.9;  // BPE wants 0.98 or more
  CHECK(contains(error_of([&] { nmt::run_prep(o); }), "--character-coverage >= 0.98"));
}

TEST_CASE("a library's exit() while stderr is captured still passes its last lines on",
          "[prep][progress]") {
  ScratchDir dir;
  const std::string path = dir.file("stderr.txt");
  std::fflush(stderr);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // as SentencePiece's LOG(FATAL): a message, then exit() in the capture's scope
    const int file = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (file < 0 || ::dup2(file, STDERR_FILENO) < 0) ::_exit(9);
    nmt::StderrCapture capture([](const std::string& line) { return "[" + line + "]"; });
    // More than a pipe holds: up to 64 KiB of it is still unread when exit() comes.
    for (int i = 0; i < 400; ++i) std::fprintf(stderr, "%d %s\n", i, std::string(999, 'x').c_str());
    std::fprintf(stderr, "fatal: the end\n");
    std::exit(3);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 3);
  const std::string text = nmt::test::read_text(path);
  CHECK(text.size() > 400 * 1000);
  CHECK(text.ends_with("[fatal: the end]\n"));
}
