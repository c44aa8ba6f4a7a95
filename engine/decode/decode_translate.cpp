// translate_lines: checkpoint + vocabulary -> model, input lines -> ids -> length-sorted batches ->
// beam search -> detokenized lines in input order, with progress and a summary.
#include "engine/decode/decode_translate.h"

#include <cuda_runtime.h>

#include <algorithm>
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
#include "engine/report/wall_time.h"
#include "kernels/cuda/stream.h"

namespace nmt {

namespace {

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

}  // namespace

std::string translate_progress_line(const TranslateStats& s, int64_t done, int64_t total) {
  char line[240];
  const double secs = std::max(s.seconds, 1e-9);
  // Empty lines cost nothing: the rate and the ETA count the decoded ones.
  const double decoded = static_cast<double>(std::max<int64_t>(done - s.empty, 0));
  const double eta = decoded > 0 ? static_cast<double>(total - done) * secs / decoded : 0.0;
  std::snprintf(line, sizeof line,
                "nmt-translate: %lld/%lld lines | %.1f sentences/s | %.0f tokens/s | eta %.0f s",
                static_cast<long long>(done), static_cast<long long>(total), decoded / secs,
                static_cast<double>(s.output_tokens) / secs, eta);
  return line;
}

Device default_decode_device() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device/driver" error
    return Device::cpu;
  }
  return devices > 0 ? Device::cuda : Device::cpu;
}

struct Translator::Loaded {
  TranslateOptions options;
  LoadedCheckpoint ckpt;
  std::string vocab_file;
  std::unique_ptr<Vocab> vocab;
  ModelShape shape;
  Device device = Device::cpu;
  std::ostream* progress = nullptr;  // for the checkpoint line when the model is first built
  // Built for sources of at most planned_longest tokens; rebuilt for a longer one.
  int64_t planned_longest = 0;
  DecodePlan plan;
  std::unique_ptr<Transformer> model;
  std::unique_ptr<BeamSearch> search;

  void plan_for(int64_t longest) {
    if (model && longest <= planned_longest) return;
    search.reset();
    model.reset();
    const int64_t rows =
        options.step_rows > 0
            ? options.step_rows
            : decode_step_rows(device, device == Device::cuda ? cuda::free_device_memory() : 0);
    plan = plan_decoding(options.beam, longest, shape.max_positions, rows);
    model = std::make_unique<Transformer>(shape, device, plan.max_rows, plan.max_len,
                                          ModelPlan{/*training=*/false});
    load_model_weights(options.checkpoint, model->params());
    search = std::make_unique<BeamSearch>(*model, options.beam);
    if (progress && planned_longest == 0)
      *progress << "nmt-translate: checkpoint " << options.checkpoint << " (step "
                << ckpt.state.step << "), vocabulary " << vocab_file << " (" << vocab->size()
                << " pieces), " << model->params().total_elements() << " parameters on "
                << device_name(device) << " in " << dtype_name(shape.compute_dtype) << ", beam "
                << options.beam.beam << ", alpha " << options.beam.alpha << "\n"
                << std::flush;
    planned_longest = longest;
  }
};

int64_t decode_step_rows(Device device, size_t free_bytes) {
  constexpr size_t kRoomyGpu = size_t{16} << 30;
  return device == Device::cuda && free_bytes >= kRoomyGpu ? 16384 : 4096;
}

DType decode_dtype(std::optional<DType> requested, Device device) {
  const DType dtype = requested.value_or(device == Device::cuda ? DType::bf16 : DType::f32);
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16)
    throw std::invalid_argument(std::string("--dtype: ") + dtype_name(dtype) +
                                " is not a float dtype (f32, bf16 or f16)");
  if (device == Device::cpu && dtype != DType::f32)
    throw std::invalid_argument(std::string("--dtype ") + dtype_name(dtype) +
                                ": the CPU decodes in f32 only (use --dtype f32 or --device cuda)");
  return dtype;
}

Translator::Translator(const TranslateOptions& options, std::ostream* progress)
    : loaded_(std::make_unique<Loaded>()) {
  validate_beam_options(options.beam);
  if (options.step_rows < 0)
    throw std::invalid_argument(
        "step-rows: must be at least 1 (or 0 for the device's default), got " +
        std::to_string(options.step_rows));
  if (options.device == Device::cuda)
    require_cuda_device("--device cuda", "translate on the CPU with --device cpu");
  Loaded& l = *loaded_;
  l.options = options;
  l.progress = progress;
  l.ckpt = read_checkpoint_state(options.checkpoint);
  l.vocab_file = vocabulary_path(options, l.ckpt);
  check_checkpoint_vocabulary(l.ckpt.state, l.vocab_file);
  l.vocab = load_vocab(l.vocab_file);
  l.device = options.device.value_or(default_decode_device());
  l.shape =
      model_shape_from(l.ckpt.config.model, l.vocab->size(), decode_dtype(options.dtype, l.device));
}

Translator::~Translator() = default;

void Translator::plan_for_any_source() {
  loaded_->plan_for(loaded_->shape.max_positions);
}

std::vector<std::vector<ScoredTranslation>> Translator::translate(
    const std::vector<std::string>& lines, int nbest, std::ostream* progress,
    TranslateStats* stats_out) {
  Loaded& l = *loaded_;
  const BeamOptions& beam = l.options.beam;
  if (nbest < 1 || nbest > beam.beam)
    throw std::invalid_argument("nbest: must be 1..beam (" + std::to_string(beam.beam) + "), got " +
                                std::to_string(nbest));
  TranslateStats stats;
  stats.lines = static_cast<int64_t>(lines.size());
  const int64_t max_positions = l.shape.max_positions;
  EncodedLines encoded = encode_input_lines(lines, *l.vocab, max_positions);
  std::vector<std::vector<int32_t>>& sources = encoded.ids;
  stats.empty = encoded.empty;
  stats.truncated = encoded.truncated;
  stats.source_tokens = encoded.tokens;
  if (progress && stats.truncated > 0)
    *progress << "nmt-translate: warning: " << stats.truncated
              << " input lines cut to model.max_positions = " << max_positions << " tokens\n";

  int64_t longest = 1;
  for (const auto& source : sources)
    longest = std::max<int64_t>(longest, static_cast<int64_t>(source.size()));
  l.plan_for(longest);
  const int64_t max_rows = l.plan.max_rows;

  // Longest first: the largest batches run (and would fail on memory) first.
  std::vector<size_t> order;
  for (size_t i = 0; i < sources.size(); ++i)
    if (!sources[i].empty()) order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return sources[a].size() > sources[b].size(); });

  std::vector<std::vector<ScoredTranslation>> out(lines.size(), {ScoredTranslation{}});
  auto start = SteadyClock::now(), last_report = start;
  int64_t done = stats.empty;
  for (size_t first = 0; first < order.size();) {
    // Sorted longest first, so the group's first source sets every step's width.
    auto width = static_cast<int64_t>(sources[order[first]].size());
    int64_t per_sentence =
        beam.beam * std::max(width, max_target_tokens(beam, width, *l.model) + 1);
    auto count = static_cast<size_t>(std::max<int64_t>(1, max_rows / per_sentence));
    size_t last = std::min(order.size(), first + count);
    std::vector<std::vector<int32_t>> group;
    for (size_t k = first; k < last; ++k) group.push_back(sources[order[k]]);
    std::vector<std::vector<Hypothesis>> found = l.search->search(group);
    for (size_t k = first; k < last; ++k) {
      const std::vector<Hypothesis>& list = found[k - first];
      std::vector<ScoredTranslation>& entries = out[order[k]];
      entries.clear();
      for (size_t h = 0; h < list.size() && h < static_cast<size_t>(nbest); ++h)
        entries.push_back({l.vocab->decode(list[h].tokens), list[h].score});
      stats.output_tokens += static_cast<int64_t>(list.front().tokens.size());
    }
    done += static_cast<int64_t>(last - first);
    first = last;
    stats.seconds = seconds_since(start);
    if (progress && (seconds_since(last_report) >= 2.0 || first == order.size())) {
      *progress << translate_progress_line(stats, done, stats.lines) << "\n" << std::flush;
      last_report = SteadyClock::now();
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

std::vector<std::string> translate_lines(const TranslateOptions& options,
                                         const std::vector<std::string>& lines,
                                         std::ostream* progress, TranslateStats* stats) {
  Translator translator(options, progress);
  std::vector<std::string> out;
  for (auto& nbest : translator.translate(lines, 1, progress, stats))
    out.push_back(std::move(nbest.front().text));
  return out;
}

}  // namespace nmt
