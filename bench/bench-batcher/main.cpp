// bench-batcher: how fast the TokenBatcher hands out batches on one core, on real shards. Preps
// bible-en-es with a small vocabulary into a temporary directory unless --data names a prepped one.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "data/batcher.h"
#include "data/prep.h"
#include "data/shard.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Row {
  int64_t max_tokens;
  int64_t world_size;
};

void run_row(const nmt::ParallelCorpus& corpus, const Row& row, double min_seconds) {
  nmt::TokenBatcherOptions o;
  o.max_tokens = row.max_tokens;
  o.max_sentences = 0;
  o.world_size = row.world_size;
  o.rank = 0;
  const auto build_start = Clock::now();
  nmt::TokenBatcher batcher(corpus, o);
  const double build_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - build_start).count();

  int64_t batches = 0, sentences = 0, tokens = 0, padded = 0;
  const auto start = Clock::now();
  double seconds = 0;
  while (seconds < min_seconds) {
    for (int i = 0; i < 64; ++i) {
      const nmt::Batch b = batcher.next();
      ++batches;
      sentences += b.sentences;
      tokens += b.src_tokens() + b.tgt_tokens();
      padded += b.sentences * (b.src_len + b.tgt_len);
    }
    seconds = std::chrono::duration<double>(Clock::now() - start).count();
  }
  std::printf("%10lld %6lld %12.0f %12.0f %12.2f %12.2f %9.1f%% %9.1f\n",
              static_cast<long long>(row.max_tokens), static_cast<long long>(row.world_size),
              batches / seconds, sentences / seconds, tokens / seconds / 1e6,
              padded / seconds / 1e6, 100.0 * static_cast<double>(tokens) / padded, build_ms);
}

}  // namespace

int main(int argc, char** argv) {
  std::string data_dir;
  std::string corpus_dir = "../shared/data/bible-en-es";
  int64_t vocab_size = 2000;
  double seconds = 2.0;
  CLI::App app{"bench-batcher: TokenBatcher throughput on one core"};
  app.add_option("--data", data_dir, "a directory written by nmt-prep (train.*.shard)");
  app.add_option("--corpus", corpus_dir, "raw corpus to prep when --data is not given")
      ->capture_default_str();
  app.add_option("--vocab-size", vocab_size, "vocabulary for the temporary prep")
      ->capture_default_str();
  app.add_option("--seconds", seconds, "minimum time per row")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  namespace fs = std::filesystem;
  fs::path temp;
  try {
    if (data_dir.empty()) {
      temp = fs::temp_directory_path() / ("bench-batcher-" + std::to_string(::getpid()));
      nmt::PrepOptions prep;
      prep.train_source = corpus_dir + "/train.en";
      prep.train_target = corpus_dir + "/train.es";
      prep.out_dir = temp.string();
      prep.spm.vocab_size = vocab_size;
      std::cerr << "bench-batcher: prepping " << corpus_dir << " (vocab " << vocab_size << ") in "
                << temp.string() << "\n";
      nmt::run_prep(prep);
      data_dir = temp.string();
    }
    const nmt::ShardCorpus corpus(data_dir + "/train.src.shard", data_dir + "/train.tgt.shard");
    std::printf("corpus: %s, %lld pairs, %lld + %lld tokens; one core, rank 0's slice\n",
                data_dir.c_str(), static_cast<long long>(corpus.size()),
                static_cast<long long>(corpus.source_shard().tokens()),
                static_cast<long long>(corpus.target_shard().tokens()));
    std::printf("%10s %6s %12s %12s %12s %12s %10s %9s\n", "max_tokens", "world", "batches/s",
                "sentences/s", "Mtok/s", "Mpadded/s", "real/pad", "epoch0 ms");
    for (const Row& row : {Row{4096, 1}, Row{16384, 1}, Row{16384, 8}, Row{65536, 1}})
      run_row(corpus, row, seconds);
    std::printf(
        "Mtok/s counts real source + target tokens (decoder positions incl. eos) that this "
        "rank receives.\n");
  } catch (const std::exception& e) {
    std::cerr << "bench-batcher: error: " << e.what() << "\n";
    if (!temp.empty()) fs::remove_all(temp);
    return 1;
  }
  if (!temp.empty()) fs::remove_all(temp);
  return 0;
}
