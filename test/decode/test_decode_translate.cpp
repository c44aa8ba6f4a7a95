// nmt-translate: translate_lines and the program on a checkpoint saved here, with a SentencePiece
// vocabulary made by nmt-prep from 300 lines of bible-en-es: one output line per input line, in
// input order, empty lines kept; invalid UTF-8, vocabulary and checkpoint errors named; n-best
// lists with scores, -i/-o files, the ETA, and the streaming mode answering line by line.
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "data/prep.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/decode/decode_translate.h"
#include "engine/model/model_shape.h"
#include "engine/model/transformer.h"
#include "test/decode/decode_test_util.h"
#include "test/support/catch.h"
#include "test/support/lib/scratch_dir.h"

namespace {

namespace fs = std::filesystem;
using nmt::test::contains;
using nmt::test::error_of;
using nmt::test::read_lines;
using nmt::test::reverse_text;
using nmt::test::ReverseText;
using nmt::test::write_lines;

const std::string kCorpus = nmt::test::shared_data_dir() + "/bible-en-es/";

// A 200-piece SentencePiece model (nmt-prep on 300 training pairs) and a checkpoint of an untrained
// model over it: outputs are arbitrary but a pure function of each input line.
struct Setup {
  nmt::test::ScratchDir dir;
  std::string vocab, checkpoint, synthetic_checkpoint;

  Setup() {
    write_lines(dir.file("train.en"), read_lines(kCorpus + "train.en", 0, 300));
    write_lines(dir.file("train.es"), read_lines(kCorpus + "train.es", 0, 300));
    nmt::PrepOptions prep;
    prep.train_source = dir.file("train.en");
    prep.train_target = dir.file("train.es");
    prep.out_dir = dir.file("prep");
    prep.spm.vocab_size = 200;
    prep.threads = 1;
    nmt::PrepReport report = nmt::run_prep(prep);
    vocab = dir.file("prep/" + report.vocab_file);

    nmt::RunConfig cfg;
    cfg.model.encoder_layers = cfg.model.decoder_layers = 1;
    cfg.model.d_model = 32;
    cfg.model.num_heads = 4;
    cfg.model.ffn_dim = 64;
    cfg.train.device = nmt::Device::cpu;
    cfg.train.precision = nmt::DType::f32;
    nmt::Transformer model(nmt::model_shape_from(cfg.model, report.vocab_size), nmt::Device::cpu,
                           64, 16);
    model.params().initialize(5);
    // The untrained model ends every sentence at once; with eos's (tied) embedding zeroed its
    // logit is 0, below the best of 199 random ones, so outputs run on and differ line by line.
    const nmt::Param* embedding = model.params().find("encoder.embed_tokens.weight");
    REQUIRE(embedding != nullptr);
    float* eos_row = embedding->value.f32() + nmt::kEosId * cfg.model.d_model;
    std::fill(eos_row, eos_row + cfg.model.d_model, 0.0f);
    nmt::CheckpointState state;
    state.step = 1;
    state.vocab_path = vocab;
    checkpoint = nmt::save_checkpoint(dir.file("ckpt"), model.params(), {}, {}, state, cfg, 0).path;
    state.vocab_path.clear();
    synthetic_checkpoint =
        nmt::save_checkpoint(dir.file("synthetic"), model.params(), {}, {}, state, cfg, 0).path;
  }
};

const Setup& setup() {
  static const Setup s;
  return s;
}

// Dev lines with an empty and a blank line among them.
std::vector<std::string> input_lines() {
  std::vector<std::string> lines = read_lines(kCorpus + "dev.en", 0, 7);
  lines.insert(lines.begin() + 2, "");
  lines.insert(lines.begin() + 5, "   ");
  return lines;
}

nmt::TranslateOptions options() {
  nmt::TranslateOptions o;
  o.checkpoint = setup().checkpoint;
  o.device = nmt::Device::cpu;
  o.beam.max_len_a = 0.5;  // short outputs keep the untrained model's decoding quick
  o.beam.max_len_b = 4;
  return o;
}

}  // namespace

TEST_CASE("translate_lines: one line out per line in, in input order, empty lines kept",
          "[decode][translate]") {
  std::vector<std::string> in = input_lines();
  std::ostringstream log;
  nmt::TranslateStats stats;
  std::vector<std::string> out = nmt::translate_lines(options(), in, &log, &stats);
  INFO(log.str());
  REQUIRE(out.size() == in.size());
  CHECK(stats.lines == 9);
  CHECK(stats.empty == 2);
  CHECK(out[2].empty());
  CHECK(out[5].empty());
  for (size_t i = 0; i < out.size(); ++i)
    if (i != 2 && i != 5) CHECK(!out[i].empty());
  CHECK(contains(log.str(), "9/9 lines"));
  CHECK(contains(log.str(), "sentences/s"));

  // Order: the reversed input (other batches, other positions) gives the reversed output, and a
  // line alone gives the same translation as in company.
  std::vector<std::string> reversed_in(in.rbegin(), in.rend());
  std::vector<std::string> reversed_out = nmt::translate_lines(options(), reversed_in);
  CHECK(std::vector<std::string>(reversed_out.rbegin(), reversed_out.rend()) == out);
  CHECK(nmt::translate_lines(options(), {in[3]}) == std::vector<std::string>{out[3]});
}

TEST_CASE("Translator: n-best lists with scores, best first, the best as translate_lines",
          "[decode][translate]") {
  nmt::TranslateOptions o = options();
  o.beam.beam = 3;
  std::vector<std::string> in = input_lines();
  const std::vector<std::string> best = nmt::translate_lines(o, in);
  nmt::Translator translator(o);
  const auto lists = translator.translate(in, 3);
  REQUIRE(lists.size() == in.size());
  for (size_t i = 0; i < lists.size(); ++i) {
    INFO("line " << i);
    REQUIRE(!lists[i].empty());
    CHECK(lists[i].size() <= 3);
    CHECK(lists[i].front().text == best[i]);
    for (size_t h = 1; h < lists[i].size(); ++h) CHECK(lists[i][h].score <= lists[i][h - 1].score);
  }
  CHECK(lists[3].size() == 3);
  CHECK(lists[3].front().score < 0);  // a log-probability over a length penalty
  CHECK(lists[2].size() == 1);        // the empty line: one empty hypothesis scored 0
  CHECK(lists[2].front().score == 0);
  // The same translator again, one line at a time and planned for any source: the same lists.
  translator.plan_for_any_source();
  CHECK(translator.translate({in[3]}, 3).front().front().text == lists[3].front().text);
  CHECK(contains(error_of([&] { translator.translate(in, 4); }), "nbest: must be 1..beam (3)"));
}

TEST_CASE("the progress line has the rate and an ETA", "[decode][translate]") {
  nmt::TranslateStats stats;
  stats.seconds = 10;
  stats.empty = 1;
  stats.output_tokens = 500;
  // 4 lines decoded in 10 s (the empty one is free): 10 left take 25 s.
  CHECK(nmt::translate_progress_line(stats, 5, 15) ==
        "nmt-translate: 5/15 lines | 0.4 sentences/s | 50 tokens/s | eta 25 s");
}

TEST_CASE("translate_lines: input, vocabulary and checkpoint errors are named",
          "[decode][translate]") {
  std::string message = error_of([] {
    nmt::translate_lines(options(), {"In the beginning", "bad \xff byte"});
  });
  CHECK(contains(message, "input line 2: invalid UTF-8"));

  nmt::TranslateOptions o = options();
  o.checkpoint = setup().synthetic_checkpoint;
  CHECK(contains(error_of([&] { nmt::translate_lines(o, {"a"}); }), "pass --vocab"));
  o.vocab = setup().vocab;  // the override is accepted when it is the trained-with file
  CHECK(nmt::translate_lines(o, {"a"}).size() == 1);

  o = options();
  o.vocab = setup().dir.file("train.en");  // not the vocabulary the checkpoint recorded
  CHECK(contains(error_of([&] { nmt::translate_lines(o, {"a"}); }),
                 "is not the one the checkpoint was trained with"));

  o = options();
  o.checkpoint = setup().dir.file("no-such-checkpoint");
  CHECK(contains(error_of([&] { nmt::translate_lines(o, {"a"}); }), "no-such-checkpoint"));

  o = options();
  o.beam.beam = 0;
  CHECK(contains(error_of([&] { nmt::translate_lines(o, {"a"}); }), "beam: must be at least 1"));

  o = options();  // the CPU decodes in f32 only
  o.dtype = nmt::DType::bf16;
  CHECK(contains(error_of([&] { nmt::translate_lines(o, {"a"}); }),
                 "--dtype bf16: the CPU decodes in f32 only"));
}

TEST_CASE("the decoding step rows: larger groups on a roomy GPU", "[decode][translate]") {
  const size_t gib = size_t{1} << 30;
  CHECK(nmt::decode_step_rows(nmt::Device::cuda, 70 * gib) == 16384);
  CHECK(nmt::decode_step_rows(nmt::Device::cuda, 16 * gib) == 16384);
  CHECK(nmt::decode_step_rows(nmt::Device::cuda, 16 * gib - 1) == 4096);  // a smaller card
  CHECK(nmt::decode_step_rows(nmt::Device::cuda, 0) == 4096);  // the runtime could not tell
  CHECK(nmt::decode_step_rows(nmt::Device::cpu, 70 * gib) == 4096);
  nmt::TranslateOptions o = options();
  o.step_rows = -1;
  CHECK(
      contains(error_of([&] { nmt::translate_lines(o, {"a"}); }), "step-rows: must be at least 1"));
}

TEST_CASE("the decoding dtype: bf16 on the GPU, f32 on the CPU, unless asked",
          "[decode][translate]") {
  CHECK(nmt::decode_dtype(std::nullopt, nmt::Device::cuda) == nmt::DType::bf16);
  CHECK(nmt::decode_dtype(std::nullopt, nmt::Device::cpu) == nmt::DType::f32);
  CHECK(nmt::decode_dtype(nmt::DType::f32, nmt::Device::cuda) == nmt::DType::f32);
  CHECK(nmt::decode_dtype(nmt::DType::f16, nmt::Device::cuda) == nmt::DType::f16);
  CHECK(nmt::decode_dtype(nmt::DType::f32, nmt::Device::cpu) == nmt::DType::f32);
  CHECK(contains(error_of([] { nmt::decode_dtype(nmt::DType::f16, nmt::Device::cpu); }),
                 "--dtype f16: the CPU decodes in f32 only"));
  CHECK(contains(error_of([] { nmt::decode_dtype(nmt::DType::i32, nmt::Device::cuda); }),
                 "not a float dtype"));
}

namespace {

nmt::TranslateOptions reverse_options() {
  nmt::TranslateOptions o;
  o.checkpoint = nmt::test::trained_reverse_checkpoint();
  o.vocab = reverse_text().vocab;  // the synthetic checkpoint records none
  o.device = nmt::Device::cpu;
  return o;
}

int64_t exact_matches(const std::vector<std::string>& out, const std::vector<std::string>& want) {
  int64_t n = 0;
  for (size_t i = 0; i < out.size() && i < want.size(); ++i) n += out[i] == want[i] ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("translate_lines with a trained reversal checkpoint reverses its input, in any batching",
          "[decode][translate]") {
  const ReverseText& text = reverse_text();
  std::vector<std::string> out = nmt::translate_lines(reverse_options(), text.sources);
  REQUIRE(out.size() == text.sources.size());
  int64_t exact = exact_matches(out, text.reversed);
  INFO(exact << " of " << out.size() << " reversed exactly; first: " << text.sources[0] << " -> "
             << out[0]);
  CHECK(exact * 10 >= static_cast<int64_t>(out.size()) * 7);
  // Tiny batches (one sentence per step group) change nothing.
  nmt::TranslateOptions small = reverse_options();
  small.step_rows = 1;
  CHECK(nmt::translate_lines(small, text.sources) == out);
}

#ifdef NMT_TRANSLATE_BINARY
namespace {

struct Run {
  int exit_code = -1;
  std::string out, err;
};

// Runs nmt-translate with `args` on `input` as stdin.
Run run_translate(const std::string& args, const std::vector<std::string>& input) {
  static nmt::test::ScratchDir io;
  write_lines(io.file("in.txt"), input);
  std::string command = "cd / && " + std::string(NMT_TRANSLATE_BINARY) + " " + args + " < " +
                        io.file("in.txt") + " > " + io.file("out.txt") + " 2> " +
                        io.file("err.txt");
  int status = std::system(command.c_str());
  Run r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream out(io.file("out.txt")), err(io.file("err.txt"));
  r.out.assign(std::istreambuf_iterator<char>(out), std::istreambuf_iterator<char>());
  r.err.assign(std::istreambuf_iterator<char>(err), std::istreambuf_iterator<char>());
  return r;
}

}  // namespace

TEST_CASE("nmt-translate end to end: stdin to stdout, progress on stderr, errors exit non-zero",
          "[decode][translate][app]") {
  const std::string base = "--device cpu --max-len-a 0.5 --max-len-b 4 --beam 3 --checkpoint ";
  std::vector<std::string> in = input_lines();
  Run ok = run_translate(base + setup().checkpoint, in);
  INFO(ok.err);
  REQUIRE(ok.exit_code == 0);
  nmt::TranslateOptions o = options();
  o.beam.beam = 3;
  std::string expected;
  for (const auto& line : nmt::translate_lines(o, in)) expected += line + "\n";
  CHECK(ok.out == expected);
  CHECK(contains(ok.err, "9/9 lines"));

  Run missing = run_translate(base + setup().dir.file("missing"), in);
  CHECK(missing.exit_code != 0);
  CHECK(missing.out.empty());
  CHECK(contains(missing.err, "missing is not a directory"));

  // A truncated weights file: the loader's message, no output.
  std::string broken = setup().dir.file("broken");
  fs::copy(setup().checkpoint, broken, fs::copy_options::recursive);
  fs::resize_file(broken + "/model.safetensors", fs::file_size(broken + "/model.safetensors") / 2);
  Run corrupt = run_translate(base + broken, in);
  CHECK(corrupt.exit_code != 0);
  CHECK(corrupt.out.empty());
  CHECK(contains(corrupt.err, "truncated"));

  // A trained checkpoint: the program reverses the task's text like the library call.
  const ReverseText& text = reverse_text();
  Run reverse =
      run_translate("--device cpu --checkpoint " + nmt::test::trained_reverse_checkpoint() +
                        " --vocab " + text.vocab,
                    text.sources);
  REQUIRE(reverse.exit_code == 0);
  std::string reversed;
  for (const auto& line : nmt::translate_lines(reverse_options(), text.sources))
    reversed += line + "\n";
  CHECK(reverse.out == reversed);

  CHECK(contains(ok.err, "9/9 lines"));
  CHECK(contains(ok.err, "| eta "));

  Run bad_text = run_translate(base + setup().checkpoint, {"fine", "not \xc3\x28 fine"});
  CHECK(bad_text.exit_code != 0);
  CHECK(bad_text.out.empty());
  CHECK(contains(bad_text.err, "input line 2: invalid UTF-8"));
}

TEST_CASE("nmt-translate: a checkpoint carries its vocabulary; --checkpoint takes checkpoint.dir",
          "[decode][translate][app]") {
  // Saved with a vocabulary that is gone afterwards, as a relative path recorded elsewhere would
  // be.
  nmt::test::ScratchDir run("nmt-translate-self-contained");
  fs::copy_file(setup().vocab, run.file("spm.model"));
  nmt::LoadedCheckpoint source = nmt::read_checkpoint_state(setup().checkpoint);
  nmt::Transformer model(nmt::model_shape_from(source.config.model, 200), nmt::Device::cpu, 64, 16);
  nmt::load_model_weights(setup().checkpoint, model.params());
  nmt::CheckpointState state;
  state.step = 1;
  state.vocab_path = run.file("spm.model");
  const std::string ckpt_dir = run.file("ckpt");
  nmt::save_checkpoint(ckpt_dir, model.params(), {}, {}, state, source.config, 0);
  fs::remove(run.file("spm.model"));
  CHECK(fs::exists(ckpt_dir + "/ckpt-1/spm.model"));

  std::vector<std::string> in = input_lines();
  const std::string args = "--device cpu --max-len-a 0.5 --max-len-b 4 --checkpoint ";
  Run expected = run_translate(args + setup().checkpoint, in);
  REQUIRE(expected.exit_code == 0);
  Run from_dir = run_translate(args + ckpt_dir, in);  // the checkpoint.dir, from another cwd
  INFO(from_dir.err);
  CHECK(from_dir.exit_code == 0);
  CHECK(from_dir.out == expected.out);
  CHECK(contains(from_dir.err, ckpt_dir + " is a checkpoint.dir: using " + ckpt_dir +
                                   "/ckpt-1 (the newest; no best recorded)"));
}

TEST_CASE("nmt-translate -i/-o files and --nbest lines 'ID ||| TEXT ||| SCORE'",
          "[decode][translate][app]") {
  const std::string base =
      "--device cpu --max-len-a 0.5 --max-len-b 4 --beam 3 --checkpoint " + setup().checkpoint;
  std::vector<std::string> in = input_lines();
  nmt::TranslateOptions o = options();
  o.beam.beam = 3;
  const std::vector<std::string> best = nmt::translate_lines(o, in);

  nmt::test::ScratchDir dir("nmt-translate-io");
  write_lines(dir.file("in.txt"), in);
  Run files =
      run_translate(base + " -i " + dir.file("in.txt") + " -o " + dir.file("out.txt"), {"ignored"});
  INFO(files.err);
  REQUIRE(files.exit_code == 0);
  CHECK(files.out.empty());
  CHECK(read_lines(dir.file("out.txt"), 0, 100) == best);

  // -o naming the input is refused before anything is written; a checkpoint that cannot load
  // leaves an existing output file as it was, also when streaming.
  Run same = run_translate(
      base + " --interactive -i " + dir.file("in.txt") + " -o " + dir.file("in.txt"), {});
  CHECK(same.exit_code == 2);
  CHECK(contains(same.err, "is the input file"));
  CHECK(read_lines(dir.file("in.txt"), 0, 100) == in);
  fs::create_directory(dir.file("broken"));
  write_lines(dir.file("broken/state.json"), {"{ not json"});
  Run broken = run_translate("--device cpu --interactive --checkpoint " + dir.file("broken") +
                                 " -i " + dir.file("in.txt") + " -o " + dir.file("out.txt"),
                             {});
  CHECK(broken.exit_code != 0);
  CHECK(read_lines(dir.file("out.txt"), 0, 100) == best);

  Run nbest = run_translate(base + " --nbest 2", in);
  REQUIRE(nbest.exit_code == 0);
  std::istringstream lines(nbest.out);
  std::string line;
  std::vector<int> per_id(in.size(), 0);
  const std::regex entry(R"((\d+) \|\|\| (.*) \|\|\| (-?\d+\.\d{6}))");
  while (std::getline(lines, line)) {
    std::smatch m;
    REQUIRE(std::regex_match(line, m, entry));
    const size_t id = std::stoul(m[1]);
    REQUIRE(id < in.size());
    if (per_id[id]++ == 0) CHECK(m[2] == best[id]);
  }
  for (size_t id = 0; id < in.size(); ++id) CHECK(per_id[id] == (id == 2 || id == 5 ? 1 : 2));

  Run too_many = run_translate(base + " --nbest 4", in);
  CHECK(too_many.exit_code == 2);
  CHECK(contains(too_many.err, "--nbest 4 exceeds --beam 3"));
}

TEST_CASE("nmt-translate --interactive answers each line before the next arrives",
          "[decode][translate][app]") {
  const std::vector<std::string> in = input_lines();
  const std::vector<std::string> best = nmt::translate_lines(options(), {in[0], in[1]});
  int to_child[2], from_child[2];
  REQUIRE(::pipe(to_child) == 0);
  REQUIRE(::pipe(from_child) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(to_child[0], 0);
    ::dup2(from_child[1], 1);
    for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) ::close(fd);
    ::execl(NMT_TRANSLATE_BINARY, NMT_TRANSLATE_BINARY, "--interactive", "--device", "cpu",
            "--max-len-a", "0.5", "--max-len-b", "4", "--checkpoint", setup().checkpoint.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(to_child[0]);
  ::close(from_child[1]);
  // One line of the child's output, waiting at most two minutes.
  std::string pending;
  auto next_line = [&]() -> std::string {
    for (;;) {
      if (size_t end = pending.find('\n'); end != std::string::npos) {
        std::string line = pending.substr(0, end);
        pending.erase(0, end + 1);
        return line;
      }
      pollfd ready{from_child[0], POLLIN, 0};
      if (::poll(&ready, 1, 120000) <= 0) return "<timed out>";
      char buffer[4096];
      const ssize_t n = ::read(from_child[0], buffer, sizeof buffer);
      if (n <= 0) return "<closed>";
      pending.append(buffer, static_cast<size_t>(n));
    }
  };
  const std::string first = in[0] + "\n", second = in[1] + "\n";
  REQUIRE(::write(to_child[1], first.data(), first.size()) == static_cast<ssize_t>(first.size()));
  CHECK(next_line() == best[0]);  // stdin is still open: the answer came as the line arrived
  REQUIRE(::write(to_child[1], second.data(), second.size()) ==
          static_cast<ssize_t>(second.size()));
  ::close(to_child[1]);
  CHECK(next_line() == best[1]);
  CHECK(next_line() == "<closed>");
  ::close(from_child[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
#endif
