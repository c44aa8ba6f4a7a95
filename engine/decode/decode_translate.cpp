// translate_lines: checkpoint + vocabulary -> model, input lines -> ids -> length-sorted batches ->
// beam search -> detokenized lines in input order, with progress and a summary.
#include "engine/decode/decode_translate.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "data/corpus_text.h"
#include "data/vocab.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/model/cuda_device_check.h"
#include "engine/model/transformer.h"

namespace nmt {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string vocabulary_path(const TranslateOptions& options, const LoadedCheckpoint& ckpt) {
  if (!options.vocab.empty()) return options.vocab;
  const std::string file = checkpoint_vocabulary_file(ckpt);
  if (file.empty())
    throw std::invalid_argument(
        "checkpoint " + options.checkpoint +
        " records no vocabulary (trained on synthetic data?): pass --vocab");
  if (!std::filesystem::exists(file))
    throw std::invalid_argument("vocabulary " + file + " (recorded in " + options.checkpoint +
                                "/state.json) does not exist: pass --vocab PATH");
  return file;
}

struct EncodedLines {
  std::vector<std::vector<int32_t>> ids;  // [lines][tokens], no bos/eos
  int64_t empty = 0, truncated = 0, tokens = 0;
};

// Ids of every line (a trailing '\r' ignored): invalid UTF-8 is an error naming the line (from 1),
// sources over max_tokens are cut.
EncodedLines encode_input_lines(const std::vector<std::string>& lines, const Vocab& vocab,
                                int64_t max_tokens) {
  EncodedLines out;
  out.ids.resize(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string_view text = lines[i];
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    if (!is_valid_utf8(text))
      throw std::invalid_argument("input line " + std::to_string(i + 1) + ": invalid UTF-8");
    std::vector<int32_t>& ids = out.ids[i];
    vocab.encode(text, ids);
    if (static_cast<int64_t>(ids.size()) > max_tokens) {
      ids.resize(static_cast<size_t>(max_tokens));
      ++out.truncated;
    }
    out.empty += ids.empty() ? 1 : 0;
    out.tokens += static_cast<int64_t>(ids.size());
  }
  return out;
}

std::string rate_line(const TranslateStats& s, int64_t done, int64_t total) {
  char line[200];
  double secs = std::max(s.seconds, 1e-9);
  std::snprintf(line, sizeof line,
                "nmt-translate: %lld/%lld lines | %.1f sentences/s | %.0f tokens/s",
                static_cast<long long>(done), static_cast<long long>(total),
                static_cast<double>(done) / secs, static_cast<double>(s.output_tokens) / secs);
  return line;
}

}  // namespace

Device default_decode_device() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device/driver" error
    return Device::cpu;
  }
  return devices > 0 ? Device::cuda : Device::cpu;
}

std::vector<std::string> translate_lines(const TranslateOptions& options,
                                         const std::vector<std::string>& lines,
                                         std::ostream* progress, TranslateStats* stats_out) {
  validate_beam_options(options.beam);
  if (options.step_rows < 1)
    throw std::invalid_argument("step-rows: must be at least 1, got " +
                                std::to_string(options.step_rows));
  if (options.device == Device::cuda)
    require_cuda_device("--device cuda", "translate on the CPU with --device cpu");
  LoadedCheckpoint ckpt = read_checkpoint_state(options.checkpoint);
  std::string vocab_file = vocabulary_path(options, ckpt);
  check_checkpoint_vocabulary(ckpt.state, vocab_file);
  std::unique_ptr<Vocab> vocab = load_vocab(vocab_file);

  TranslateStats stats;
  stats.lines = static_cast<int64_t>(lines.size());
  const ModelShape shape = model_shape_from(ckpt.config.model, vocab->size());
  const int64_t max_positions = shape.max_positions;
  EncodedLines encoded = encode_input_lines(lines, *vocab, max_positions);
  std::vector<std::vector<int32_t>>& sources = encoded.ids;
  stats.empty = encoded.empty;
  stats.truncated = encoded.truncated;
  stats.source_tokens = encoded.tokens;
  if (progress && stats.truncated > 0)
    *progress << "nmt-translate: warning: " << stats.truncated
              << " input lines cut to model.max_positions = " << max_positions << " tokens\n";

  // Plan the model for this input.
  int64_t longest = 1;
  for (const auto& s : sources)
    longest = std::max<int64_t>(longest, static_cast<int64_t>(s.size()));
  const BeamOptions& beam = options.beam;
  const DecodePlan plan = plan_decoding(beam, longest, max_positions, options.step_rows);
  const int64_t max_rows = plan.max_rows;
  Device device = options.device.value_or(default_decode_device());
  Transformer model(shape, device, max_rows, plan.max_len);
  load_model_weights(options.checkpoint, model.params());
  BeamSearch search(model, beam);
  if (progress)
    *progress << "nmt-translate: checkpoint " << options.checkpoint << " (step " << ckpt.state.step
              << "), vocabulary " << vocab_file << " (" << vocab->size() << " pieces), "
              << model.params().total_elements() << " parameters on " << device_name(device)
              << ", beam " << beam.beam << ", alpha " << beam.alpha << "\n"
              << std::flush;

  // Longest first: the largest batches run (and would fail on memory) first.
  std::vector<size_t> order;
  for (size_t i = 0; i < sources.size(); ++i)
    if (!sources[i].empty()) order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return sources[a].size() > sources[b].size(); });

  std::vector<std::string> out(lines.size());
  auto start = Clock::now(), last_report = start;
  int64_t done = stats.empty;
  for (size_t first = 0; first < order.size();) {
    // Sorted longest first, so the group's first source sets every step's width.
    auto width = static_cast<int64_t>(sources[order[first]].size());
    int64_t per_sentence = beam.beam * std::max(width, max_target_tokens(beam, width, model) + 1);
    auto count = static_cast<size_t>(std::max<int64_t>(1, max_rows / per_sentence));
    size_t last = std::min(order.size(), first + count);
    std::vector<std::vector<int32_t>> group;
    for (size_t k = first; k < last; ++k) group.push_back(sources[order[k]]);
    std::vector<std::vector<Hypothesis>> found = search.search(group);
    for (size_t k = first; k < last; ++k) {
      const std::vector<int32_t>& best = found[k - first].front().tokens;
      out[order[k]] = vocab->decode(best);
      stats.output_tokens += static_cast<int64_t>(best.size());
    }
    done += static_cast<int64_t>(last - first);
    first = last;
    stats.seconds = seconds_since(start);
    if (progress && (seconds_since(last_report) >= 2.0 || first == order.size())) {
      *progress << rate_line(stats, done, stats.lines) << "\n" << std::flush;
      last_report = Clock::now();
    }
  }
  stats.seconds = seconds_since(start);
  if (progress) {
    char line[160];
    std::snprintf(line, sizeof line, "nmt-translate: done: %lld lines (%lld empty) in %.2f s\n",
                  static_cast<long long>(stats.lines), static_cast<long long>(stats.empty),
                  stats.seconds);
    *progress << line << std::flush;
  }
  if (stats_out) *stats_out = stats;
  return out;
}

}  // namespace nmt
