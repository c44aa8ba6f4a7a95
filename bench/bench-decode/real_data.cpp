// bench-decode's real-data mode: checkpoint and vocabulary loaded as nmt-translate loads them, the
// dev sources encoded once, then for each beam one BeamSearch over one model planned for the
// largest run, each batch size timed around its search calls, the outputs detokenised and scored.
#include "bench/bench-decode/real_data.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>

#include "bench/bench-decode/decode_rows.h"
#include "bench/bench-decode/graph_summary.h"
#include "data/bleu.h"
#include "data/bleu_io.h"
#include "data/corpus_text.h"
#include "data/vocab.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/decode/decode.h"
#include "engine/decode/incremental_decoder.h"
#include "engine/model/cuda_device_check.h"
#include "engine/model/transformer.h"

namespace nmt::bench_decode {

namespace {

using Clock = std::chrono::steady_clock;

struct DevSet {
  std::vector<std::vector<int32_t>> sources;  // [lines][tokens], no bos/eos, cut to max_positions
  std::vector<std::string> references;        // [lines], or empty
  int64_t truncated = 0;
};

std::string vocabulary_file(const RealDataOptions& o, const LoadedCheckpoint& ckpt) {
  std::string path = o.vocab.empty() ? ckpt.state.vocab_path : o.vocab;
  if (path.empty())
    throw std::invalid_argument(
        "checkpoint " + o.checkpoint +
        " records no vocabulary (trained on synthetic data?): pass --vocab-file");
  if (!std::filesystem::exists(path))
    throw std::invalid_argument("vocabulary " + path + " does not exist: pass --vocab-file PATH");
  check_checkpoint_vocabulary(ckpt.state, path);
  return path;
}

// The source lines (the first max_sentences when set), encoded as nmt-translate encodes its input.
DevSet read_dev_set(const RealDataOptions& o, const Vocab& vocab, int64_t max_positions) {
  if (!std::filesystem::is_regular_file(o.source))
    throw std::invalid_argument("--source " + o.source + ": no such file");
  DevSet dev;
  TextLines lines(o.source);
  TextLines::Cursor cursor = lines.cursor();
  std::string_view line;
  while ((o.max_sentences == 0 || static_cast<int64_t>(dev.sources.size()) < o.max_sentences) &&
         cursor.next(line)) {
    if (!is_valid_utf8(line))
      throw std::invalid_argument(o.source + " line " + std::to_string(cursor.line_number()) +
                                  ": invalid UTF-8");
    std::vector<int32_t>& ids = dev.sources.emplace_back();
    vocab.encode(line, ids);
    if (static_cast<int64_t>(ids.size()) > max_positions) {
      ids.resize(static_cast<size_t>(max_positions));
      ++dev.truncated;
    }
  }
  if (dev.sources.empty()) throw std::invalid_argument("--source " + o.source + ": no lines");
  if (!o.reference.empty()) {
    dev.references = read_metric_lines(o.reference);
    if (dev.references.size() < dev.sources.size())
      throw std::invalid_argument("--reference " + o.reference + ": " +
                                  std::to_string(dev.references.size()) + " lines for " +
                                  std::to_string(dev.sources.size()) + " source lines");
    dev.references.resize(dev.sources.size());
  }
  return dev;
}

// The lines a run decodes, in the order it decodes them: every line, longest source first (as
// nmt-translate sorts), or for batch 1 with latency_sentences set, that many spread evenly over
// the file. Empty sources are left out (they take no model time) but counted by the caller.
std::vector<size_t> run_order(const DevSet& dev, int64_t batch, int64_t latency_sentences) {
  std::vector<size_t> order;
  const size_t n = dev.sources.size();
  if (batch == 1 && latency_sentences > 0 && static_cast<size_t>(latency_sentences) < n) {
    for (size_t k = 0; k < static_cast<size_t>(latency_sentences); ++k)
      order.push_back(k * n / static_cast<size_t>(latency_sentences));
  } else {
    for (size_t i = 0; i < n; ++i) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return dev.sources[a].size() > dev.sources[b].size();
  });
  return order;
}

DecodeRow run_one(BeamSearch& search, const Vocab& vocab, const DevSet& dev, int64_t batch,
                  int64_t latency_sentences) {
  DecodeRow row;
  row.beam = search.options().beam;
  row.batch = batch;
  const std::vector<size_t> order = run_order(dev, batch, latency_sentences);
  std::vector<size_t> decoded;  // non-empty lines, in decoding order
  for (size_t i : order)
    if (!dev.sources[i].empty()) decoded.push_back(i);
  std::vector<std::vector<int32_t>> best(dev.sources.size());
  const size_t step = batch == 0 ? std::max<size_t>(decoded.size(), 1) : static_cast<size_t>(batch);
  for (size_t first = 0; first < decoded.size(); first += step) {
    const size_t last = std::min(decoded.size(), first + step);
    std::vector<std::vector<int32_t>> group;
    for (size_t k = first; k < last; ++k) group.push_back(dev.sources[decoded[k]]);
    const auto start = Clock::now();
    std::vector<std::vector<Hypothesis>> found = search.search(group);  // ends on the host
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    row.seconds += seconds;
    if (batch == 1) {
      row.latencies.push_back(seconds);
      row.latency_source_tokens.push_back(static_cast<int64_t>(group.front().size()));
    }
    for (size_t k = first; k < last; ++k)
      best[decoded[k]] = std::move(found[k - first].front().tokens);
  }
  row.sentences = static_cast<int64_t>(order.size());
  std::vector<std::string> hyps, refs;
  for (size_t i : order) {
    row.target_tokens += static_cast<int64_t>(best[i].size());
    hyps.push_back(vocab.decode(best[i]));
    if (!dev.references.empty()) refs.push_back(dev.references[i]);
  }
  if (!refs.empty()) row.bleu = corpus_bleu(hyps, refs).score;
  return row;
}

void check_options(const RealDataOptions& o) {
  if (o.beams.empty()) throw std::invalid_argument("--beams: give at least one beam size");
  for (int64_t beam : o.beams)
    if (beam < 1) throw std::invalid_argument("--beams: " + std::to_string(beam) + " is below 1");
  if (o.batches.empty()) throw std::invalid_argument("--batches: give at least one batch size");
  for (const std::string& b : o.batches) parse_batch(b);
}

int run(const RealDataOptions& o, const std::string& device_name, const std::string& dtype_name) {
  check_options(o);
  const Device device = device_name == "cuda" ? Device::cuda : Device::cpu;
  if (device == Device::cuda) require_cuda_device("--device cuda", "use --device cpu");
  LoadedCheckpoint ckpt = read_checkpoint_state(o.checkpoint);
  const std::string vocab_path = vocabulary_file(o, ckpt);
  std::unique_ptr<Vocab> vocab = load_vocab(vocab_path);
  const DType dtype = dtype_name == "bf16" ? DType::bf16 : DType::f32;
  const ModelShape shape = model_shape_from(ckpt.config.model, vocab->size(), dtype);
  const DevSet dev = read_dev_set(o, *vocab, shape.max_positions);

  // One model for every run: planned for the "all" runs' rows, and at least the largest fixed
  // batch of the longest sentences at the largest beam, so no run is split by the plan.
  int64_t longest = 1, largest_batch = 1;
  for (const auto& s : dev.sources) longest = std::max<int64_t>(longest, s.size());
  for (const std::string& b : o.batches) largest_batch = std::max(largest_batch, parse_batch(b));
  BeamOptions widest;
  widest.beam = *std::max_element(o.beams.begin(), o.beams.end());
  DecodePlan plan = plan_decoding(widest, longest, shape.max_positions, o.all_rows);
  plan.max_rows = std::max(plan.max_rows, largest_batch * widest.beam * plan.max_len);
  Transformer model(shape, device, plan.max_rows, plan.max_len, ModelPlan{/*training=*/false});
  load_model_weights(o.checkpoint, model.params());
  std::printf(
      "bench-decode: checkpoint %s (step %lld), %s %s, %lld parameters, vocabulary %lld; %zu "
      "lines of %s (%lld cut to max_positions), plan %lld rows x %lld positions\n",
      o.checkpoint.c_str(), static_cast<long long>(ckpt.state.step), device_name.c_str(),
      dtype_name.c_str(), static_cast<long long>(model.params().total_elements()),
      static_cast<long long>(vocab->size()), dev.sources.size(), o.source.c_str(),
      static_cast<long long>(dev.truncated), static_cast<long long>(plan.max_rows),
      static_cast<long long>(plan.max_len));
  std::fflush(stdout);

  nlohmann::json rows = nlohmann::json::array();
  bool graphs_on = false;
  for (int64_t beam : o.beams) {
    BeamOptions options;
    options.beam = beam;
    BeamSearch search(model, options);
    std::vector<std::vector<int32_t>> warmup;  // cuBLAS plans, scratch, first-touch pages
    for (const auto& s : dev.sources)
      if (!s.empty() && static_cast<int64_t>(warmup.size()) < o.warmup_sentences)
        warmup.push_back(s);
    search.search(warmup);
    for (const std::string& b : o.batches) {
      nlohmann::json r =
          row_json(run_one(search, *vocab, dev, parse_batch(b), o.latency_sentences));
      std::printf("  beam %lld batch %s: %lld sentences in %.3f s, %.0f target tokens/s\n",
                  static_cast<long long>(beam), b.c_str(),
                  static_cast<long long>(r["sentences"].get<int64_t>()), r["seconds"].get<double>(),
                  r["target_tokens_per_s"].get<double>());
      std::fflush(stdout);
      rows.push_back(std::move(r));
    }
    const IncrementalDecoder& decoder = *search.incremental_decoder();
    graphs_on = decoder.graphs();
    std::printf("  beam %lld: %s\n", static_cast<long long>(beam),
                graphs_summary(decoder.graphs(), decoder.graph_stats()).c_str());
    std::fflush(stdout);
  }
  const std::string title = "ours (bench-decode, BeamSearch) on " + device_name + ", " + dtype_name;
  print_table(stdout, title, rows);
  if (!o.json.empty()) {
    nlohmann::json doc;
    doc["system"] = "ours";
    doc["title"] = title;
    doc["device"] = device_name;
    doc["dtype"] = dtype_name;
    doc["decode_graphs"] = graphs_on;
    doc["checkpoint"] = o.checkpoint;
    doc["source"] = o.source;
    doc["reference"] = o.reference;
    doc["lines"] = dev.sources.size();
    doc["rows"] = rows;
    std::ofstream file(o.json);
    file << doc.dump(2) << "\n";
    if (!file) throw std::runtime_error("--json " + o.json + ": cannot write");
  }
  return 0;
}

}  // namespace

void add_real_data_options(CLI::App& app, RealDataOptions& o) {
  const std::string group = "Real data (a checkpoint and a dev file instead of random weights)";
  CLI::Option* checkpoint = app.add_option("--checkpoint", o.checkpoint,
                                           "checkpoint directory (ckpt-<step>) from nmt-train")
                                ->group(group);
  app.add_option("--vocab-file", o.vocab,
                 "vocabulary file (default: the one the checkpoint records)")
      ->group(group);
  app.add_option("--source", o.source, "dev source file, one sentence a line")->group(group);
  app.add_option("--reference", o.reference, "its reference translations: BLEU per run")
      ->group(group);
  app.add_option("--json", o.json, "also write the table to this JSON file")->group(group);
  app.add_option("--beams", o.beams, "beam sizes, 1 = greedy")
      ->delimiter(',')
      ->group(group)
      ->capture_default_str();
  app.add_option("--batches", o.batches, "sentences per search call: numbers or 'all'")
      ->delimiter(',')
      ->group(group)
      ->capture_default_str();
  app.add_option("--all-rows", o.all_rows, "decoder rows per step of the 'all' runs")
      ->check(CLI::PositiveNumber)
      ->group(group)
      ->capture_default_str();
  app.add_option("--max-sentences", o.max_sentences, "decode the first N lines only (0 = all)")
      ->check(CLI::NonNegativeNumber)
      ->group(group);
  app.add_option("--latency-sentences", o.latency_sentences,
                 "batch-1 runs decode N lines spread over the file (0 = all)")
      ->check(CLI::NonNegativeNumber)
      ->group(group);
  app.add_option("--warmup-sentences", o.warmup_sentences, "decoded once per beam before timing")
      ->check(CLI::NonNegativeNumber)
      ->group(group)
      ->capture_default_str();
  // Every option of the group but --checkpoint is meaningless without it; --source is required.
  for (CLI::Option* option : app.get_options())
    if (option->get_group() == group && option != checkpoint) option->needs(checkpoint);
  checkpoint->needs(app.get_option("--source"));
}

int run_real_data(const RealDataOptions& o, const std::string& device_name,
                  const std::string& dtype_name) {
  try {
    return run(o, device_name, dtype_name);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-decode: %s\n", e.what());
    return 1;
  }
}

}  // namespace nmt::bench_decode
