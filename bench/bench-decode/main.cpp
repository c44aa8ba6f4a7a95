// bench-decode: sentences/s of beam search (the incremental decoder, key/value caches) on random
// sources and weights. The eos row of the output projection is zeroed, so every hypothesis runs to
// its length limit: the worst case. With --checkpoint, the real-data mode instead (real_data.h): a
// trained model translating a dev file at several beam and batch sizes, with target tokens/s,
// sentences/s, latency and BLEU. On CUDA the decoder replays its steps from CUDA graphs unless
// --graphs off (or NMT_DECODE_GRAPHS=0); every run prints whether they were on.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench/bench-decode/graph_summary.h"
#include "bench/bench-decode/real_data.h"
#include "data/special_ids.h"
#include "engine/decode/decode.h"
#include "engine/decode/incremental_decoder.h"
#include "engine/model/transformer.h"
#include "kernels/elementwise.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Result {
  double seconds = 0;
  int64_t output_tokens = 0;
  std::vector<std::vector<int32_t>> best;
  std::string graphs;  // graphs_summary of the search's decoder
};

Result run(nmt::Transformer& model, nmt::BeamOptions options,
           const std::vector<std::vector<int32_t>>& sources) {
  nmt::BeamSearch search(model, options);
  Result r;
  const auto start = Clock::now();
  std::vector<std::vector<nmt::Hypothesis>> found = search.search(sources);
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (const auto& list : found) {
    r.best.push_back(list.front().tokens);
    r.output_tokens += static_cast<int64_t>(list.front().tokens.size());
  }
  const nmt::IncrementalDecoder& decoder = *search.incremental_decoder();
  r.graphs = nmt::bench_decode::graphs_summary(decoder.graphs(), decoder.graph_stats());
  return r;
}

// Zeroes the eos row of the output projection (master and working copy): its logit is then 0,
// below the best of thousands of random ones, so no hypothesis ends before its limit.
void silence_eos(nmt::Transformer& model) {
  const char* name = model.shape().shared_embeddings ? "encoder.embed_tokens.weight"
                                                     : "decoder.output_projection.weight";
  const nmt::Param* p = model.params().find(name);
  const int64_t d = model.shape().d_model;
  nmt::Tensor row = p->value.reshaped({model.shape().vocab, d}).rows(nmt::kEosId, nmt::kEosId + 1);
  nmt::fill_zero(row);
  model.params().sync_compute();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench-decode: beam search with the decoder's key/value cache"};
  std::string device_name = "cpu", dtype_name = "f32";
  int64_t sentences = 16, source_len = 20, layers = 6, d_model = 512, heads = 8, ffn = 2048;
  int64_t vocab = 8000, beam = 4, step_rows = 4096;
  std::string graphs;
  app.add_option("--device", device_name, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--dtype", dtype_name, "compute dtype: f32 or bf16 (cuda)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--sentences", sentences, "random sources")->check(CLI::PositiveNumber);
  app.add_option("--source-len", source_len, "tokens per source")->check(CLI::PositiveNumber);
  app.add_option("--layers", layers, "encoder and decoder layers")->check(CLI::PositiveNumber);
  app.add_option("--d-model", d_model, "model width")->check(CLI::PositiveNumber);
  app.add_option("--heads", heads, "attention heads")->check(CLI::PositiveNumber);
  app.add_option("--ffn", ffn, "feed-forward width")->check(CLI::PositiveNumber);
  app.add_option("--vocab", vocab, "vocabulary size")->check(CLI::Range(8, 1 << 20));
  app.add_option("--beam", beam, "beam size")->check(CLI::PositiveNumber);
  app.add_option("--step-rows,--batch-tokens", step_rows, "as nmt-translate's")
      ->check(CLI::PositiveNumber);
  app.add_option("--graphs", graphs,
                 "on or off: the decoder's steps replayed from CUDA graphs (default on, unless "
                 "NMT_DECODE_GRAPHS=0)")
      ->check(CLI::IsMember({"on", "off"}));
  nmt::bench_decode::RealDataOptions real_data;
  nmt::bench_decode::add_real_data_options(app, real_data);
  CLI11_PARSE(app, argc, argv);
  if (!graphs.empty()) nmt::set_decode_graphs_default(graphs == "on");
  if (!real_data.checkpoint.empty())
    return nmt::bench_decode::run_real_data(real_data, device_name, dtype_name);

  try {
    nmt::ModelShape shape;
    shape.vocab = vocab;
    shape.d_model = d_model;
    shape.heads = heads;
    shape.ffn_dim = ffn;
    shape.encoder_layers = shape.decoder_layers = layers;
    shape.compute_dtype = dtype_name == "bf16" ? nmt::DType::bf16 : nmt::DType::f32;
    nmt::BeamOptions options;
    options.beam = beam;
    // nmt-translate's plan for this input.
    const nmt::DecodePlan plan =
        nmt::plan_decoding(options, source_len, shape.max_positions, step_rows);
    const int64_t max_len = plan.max_len, max_rows = plan.max_rows;
    nmt::Device device = device_name == "cuda" ? nmt::Device::cuda : nmt::Device::cpu;
    nmt::Transformer model(shape, device, max_rows, max_len, nmt::ModelPlan{/*training=*/false});
    model.params().initialize(1);
    silence_eos(model);

    std::mt19937 rng(7);
    std::uniform_int_distribution<int32_t> token(nmt::kFirstRegularId,
                                                 static_cast<int32_t>(vocab) - 1);
    std::vector<std::vector<int32_t>> sources(static_cast<size_t>(sentences));
    for (auto& s : sources)
      for (int64_t t = 0; t < source_len; ++t) s.push_back(token(rng));

    std::printf(
        "bench-decode: %s %s, %lld+%lld layers, d %lld, heads %lld, ffn %lld, vocab %lld; "
        "%lld sources of %lld tokens, beam %lld, plan length %lld, plan %lld rows\n",
        device_name.c_str(), dtype_name.c_str(), static_cast<long long>(layers),
        static_cast<long long>(layers), static_cast<long long>(d_model),
        static_cast<long long>(heads), static_cast<long long>(ffn), static_cast<long long>(vocab),
        static_cast<long long>(sentences), static_cast<long long>(source_len),
        static_cast<long long>(beam), static_cast<long long>(max_len),
        static_cast<long long>(max_rows));
    run(model, options, {sources.front()});  // warm-up: cuBLAS plans, scratch, first-touch pages
    const Result incremental = run(model, options, sources);
    std::printf("  %-12s %8.3f s  %8.2f sentences/s  %9.0f output tokens/s\n", "incremental",
                incremental.seconds, static_cast<double>(sentences) / incremental.seconds,
                static_cast<double>(incremental.output_tokens) / incremental.seconds);
    std::printf("  %s\n", incremental.graphs.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-decode: %s\n", e.what());
    return 1;
  }
  return 0;
}
