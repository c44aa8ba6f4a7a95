// bench-decode's real-data mode: a trained checkpoint and a dev source file (plus its reference,
// optional) translated with BeamSearch, as nmt-translate does, for each beam size and each batch
// size; one DecodeRow per run, printed as a table and written as JSON (docs/perf.md).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace nmt::bench_decode {

struct RealDataOptions {
  std::string checkpoint;  // a ckpt-<step> directory; empty = the random-weights mode
  std::string vocab;       // "" = the vocabulary recorded in the checkpoint
  std::string source;      // one sentence a line, raw text
  std::string reference;   // "" = no BLEU
  std::string json;        // "" = no JSON file
  std::vector<int64_t> beams{1, 4};
  std::vector<std::string> batches{"1", "32", "all"};
  int64_t all_rows = 32768;       // decoder rows per step of the "all" runs: the model's plan
  int64_t max_sentences = 0;      // the first N lines of source (and reference); 0 = all
  int64_t latency_sentences = 0;  // batch-1 runs decode N lines spread over the file; 0 = all
  int64_t warmup_sentences = 8;   // decoded once per beam before timing
};

// Adds --checkpoint, --vocab-file, --source, --reference, --json, --beams, --batches, --all-rows,
// --max-sentences, --latency-sentences, --warmup-sentences to `app`, in a group of their own.
void add_real_data_options(CLI::App& app, RealDataOptions& options);

// Runs every (beam, batch) pair on `device_name` ("cpu" or "cuda") computing in `dtype_name`
// ("f32" or "bf16"); prints progress, then the table, to stdout. Returns the exit code: 0, or 1
// after one message on stderr naming the bad file, line or option.
int run_real_data(const RealDataOptions& options, const std::string& device_name,
                  const std::string& dtype_name);

}  // namespace nmt::bench_decode
