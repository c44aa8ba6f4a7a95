// bench-step: times whole Transformer training steps (zero grads, forward+backward with label
// smoothing, Adam) on one fixed batch of random full-length sentences, as bench/torch_step.py does
// in PyTorch; prints ms/step, target tokens/s, the phase split and device memory (and JSON).
// The timed steps run inside cudaProfilerStart/Stop, so `ncu --profile-from-start off` (as
// bench/run-step.sh runs it) sees those steps' kernels only, not set-up or warmup.
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench-step/step_timer.h"
#include "data/batch.h"
#include "engine/config/config.h"
#include "engine/model/flop_count.h"
#include "engine/model/transformer.h"
#include "engine/report/device_peak.h"
#include "engine/train/loss_scaler.h"
#include "engine/train/optimizer.h"

namespace {

using nmt::Device;
using nmt::DType;

constexpr int kSkipped = 77;  // ctest's SKIP_RETURN_CODE: no GPU here

struct Options {
  std::string model = "base", precision = "bf16", device = "cuda", norm = "post", json;
  std::string graphs = "on";  // train.cuda_graphs: forward and backward replayed from a graph
  int64_t batch = 128, src_len = 64, tgt_len = 64, vocab = 32768, warmup = 10, steps = 50;
  double lr = 1e-4, clip = 0;
  uint64_t seed = 1;
  int64_t first_steps = 0;  // print the first N steps' times, warmup included
};

nmt::ModelShape shape_for(const Options& o) {
  nmt::ModelShape s;  // Transformer-base: d 512, 8 heads, FFN 2048, 6+6 layers, dropout 0.1
  if (o.model == "big") {
    s.d_model = 1024;
    s.heads = 16;
    s.ffn_dim = 4096;
  } else if (o.model == "tiny") {
    s.d_model = 64;
    s.heads = 4;
    s.ffn_dim = 256;
    s.encoder_layers = s.decoder_layers = 2;
  }
  s.vocab = o.vocab;
  s.pre_norm = o.norm == "pre";
  s.shared_embeddings = true;
  s.compute_dtype = o.precision == "fp32"   ? DType::f32
                    : o.precision == "fp16" ? DType::f16
                                            : DType::bf16;
  return s;
}

// Every sentence full length (no padding): src_len source ids, tgt_len - 1 target ids (the decoder
// sees bos + those, and predicts those + eos: tgt_len positions).
nmt::Batch random_batch(const Options& o) {
  std::mt19937 rng(static_cast<uint32_t>(o.seed));
  std::uniform_int_distribution<int32_t> id(nmt::kFirstRegularId,
                                            static_cast<int32_t>(o.vocab - 1));
  std::vector<std::vector<int32_t>> src(o.batch), tgt(o.batch);
  std::vector<int64_t> ids(o.batch);
  for (int64_t i = 0; i < o.batch; ++i) {
    for (int64_t j = 0; j < o.src_len; ++j) src[i].push_back(id(rng));
    for (int64_t j = 0; j + 1 < o.tgt_len; ++j) tgt[i].push_back(id(rng));
    ids[i] = i;
  }
  nmt::Batch batch = nmt::make_batch(src, tgt, ids, 1);
  nmt::add_row_orders(batch);  // as nmt-train's batches have them
  return batch;
}

size_t device_free_bytes() {
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess)
    throw std::runtime_error("cudaMemGetInfo failed");
  return free;
}

void write_json_atomically(const std::string& path, const nlohmann::json& j) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump(2) << "\n";
    if (!out) throw std::runtime_error("--json: cannot write " + tmp);
  }
  std::filesystem::rename(tmp, path);
}

// "off", or what the step's CUDA graphs did ("on: 49 replayed, 1 op by op, 1 captures of ...").
std::string graphs_line(const nmt::Transformer& model) {
  const nmt::TrainGraphStats* g = model.train_graph_stats();
  return g == nullptr ? "off" : "on: " + nmt::describe(*g);
}

int run(const Options& o) {
  Device device = o.device == "cpu" ? Device::cpu : Device::cuda;
  size_t free_before = 0;
  if (device == Device::cuda) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      std::cout << "bench-step: no CUDA device found; skipped (run with --device cpu --model tiny "
                   "for a CPU smoke run)\n";
      return kSkipped;
    }
    cudaFree(nullptr);  // create the context first, so its memory is not counted as ours
    free_before = device_free_bytes();
  }
  nmt::ModelShape shape = shape_for(o);
  nmt::Batch batch = random_batch(o);
  nmt::Transformer model(shape, device, o.batch * std::max(o.src_len, o.tgt_len),
                         std::max(o.src_len, o.tgt_len));
  model.params().initialize(o.seed);
  model.set_train_graphs(o.graphs == "on");
  nmt::OptimizerConfig oc;  // Adam, beta2 0.98 as in the paper (and bench/torch_step.py)
  oc.beta2 = 0.98;
  nmt::Optimizer optimizer(model.params(), oc, device);
  nmt::LossScaler scaler(shape.compute_dtype, 32768, 1000);
  const float label_smoothing = 0.1f;
  const double tokens = static_cast<double>(batch.tgt_tokens());

  nmt::bench::StepTimer timer(device);
  std::vector<nmt::bench::StepSample> samples;
  std::vector<double> first_ms;  // the first --first-steps steps, warmup included
  double loss_first = 0, loss_last = 0;
  int64_t skipped = 0;
  for (int64_t i = 0; i < o.warmup + o.steps; ++i) {
    if (device == Device::cuda && i == o.warmup) (void)cudaProfilerStart();  // no-op unprofiled
    timer.start();
    model.zero_grads();
    nmt::StepContext ctx{o.seed, static_cast<uint64_t>(i + 1), true};
    // As nmt-train's step: the update is enqueued behind backward before anything is read back.
    model.start_forward_backward(batch, ctx, label_smoothing, static_cast<float>(scaler.scale()));
    timer.forward_backward_done();
    optimizer.enqueue_step(i + 1, o.lr, tokens * scaler.scale(), o.clip);
    const nmt::LossSums sums = model.loss_sums();
    const nmt::OptimizerStepStats st = optimizer.finish_step();
    scaler.update(st.skipped);
    nmt::bench::StepSample sample = timer.finish();
    if (i < o.first_steps) first_ms.push_back(sample.step_ms);
    double loss = sums.loss / static_cast<double>(std::max<int64_t>(sums.tokens, 1));
    if (i == 0) loss_first = loss;
    loss_last = loss;
    if (i < o.warmup) continue;
    samples.push_back(sample);
    skipped += st.skipped;
  }
  if (device == Device::cuda) (void)cudaProfilerStop();
  size_t used = device == Device::cuda ? free_before - device_free_bytes() : 0;

  nmt::bench::StepStats st = nmt::bench::summarize(samples);
  double flops = nmt::training_flops(shape, nmt::batch_dims(batch));
  nmt::DevicePeak peak = nmt::device_peak_for_training(device, shape.compute_dtype);
  double tflops = flops / (st.median.step_ms * 1e-3) / 1e12;
  std::string config = "ours " + o.precision + " " + o.model;
  if (o.batch != 128) config += " " + std::to_string(o.batch) + "x" + std::to_string(o.tgt_len);
  nlohmann::json j = {
      {"config", config},
      {"impl", "ours"},
      {"model", o.model},
      {"precision", o.precision},
      {"norm", o.norm},
      {"device", device == Device::cuda ? peak.device_name : "cpu"},
      {"batch", o.batch},
      {"src_len", o.src_len},
      {"tgt_len", o.tgt_len},
      {"vocab", o.vocab},
      {"params", model.params().total_elements()},
      {"warmup", o.warmup},
      {"steps", o.steps},
      {"step_ms_median", st.median.step_ms},
      {"step_ms_mean", st.mean.step_ms},
      {"step_ms_min", st.min_step_ms},
      {"fwd_bwd_ms_median", st.median.forward_backward_ms},
      {"optimizer_ms_median", st.median.optimizer_ms},
      {"tgt_tokens_per_step", tokens},
      {"tgt_tokens_per_s", tokens / (st.median.step_ms * 1e-3)},
      {"tflops_per_s", tflops},
      {"mfu", peak.flops_per_s > 0 ? flops / (st.median.step_ms * 1e-3) / peak.flops_per_s : 0.0},
      {"device_mem_mib", static_cast<double>(used) / (1 << 20)},
      {"arena_mib", static_cast<double>(model.arena_bytes()) / (1 << 20)},
      {"loss_first", loss_first},
      {"loss_last", loss_last},
      {"skipped_steps", skipped},
      {"cuda_graphs", graphs_line(model)},
  };
  std::printf(
      "%s (%s-norm, %lld params) on %s: %lld x %lld/%lld tokens, %lld steps after %lld warmup\n"
      "  step ms: median %.2f, mean %.2f, min %.2f  (forward+backward %.2f, optimizer %.2f)\n"
      "  target tokens/s %.0f, %.1f TFLOP/s (MFU %.1f%% of %s)\n"
      "  memory: arena %.0f MiB, device use %.0f MiB; loss %.3f -> %.3f, skipped steps %lld\n",
      config.c_str(), o.norm.c_str(), static_cast<long long>(model.params().total_elements()),
      j["device"].get<std::string>().c_str(), static_cast<long long>(o.batch),
      static_cast<long long>(o.src_len), static_cast<long long>(o.tgt_len),
      static_cast<long long>(o.steps), static_cast<long long>(o.warmup), st.median.step_ms,
      st.mean.step_ms, st.min_step_ms, st.median.forward_backward_ms, st.median.optimizer_ms,
      j["tgt_tokens_per_s"].get<double>(), tflops, 100 * j["mfu"].get<double>(),
      peak.flops_per_s > 0 ? peak.precision.c_str() : peak.unknown_reason.c_str(),
      j["arena_mib"].get<double>(), j["device_mem_mib"].get<double>(), loss_first, loss_last,
      static_cast<long long>(skipped));
  if (device == Device::cuda) std::printf("  cuda graphs: %s\n", graphs_line(model).c_str());
  if (!first_ms.empty()) {
    std::printf("  first steps ms:");
    for (double ms : first_ms) std::printf(" %.2f", ms);
    std::printf("\n");
  }
  if (!o.json.empty()) write_json_atomically(o.json, j);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench-step: ms/step and target tokens/s of whole Transformer training steps"};
  Options o;
  app.add_option("--model", o.model, "base, big or tiny (2+2 layers, d 64)")
      ->check(CLI::IsMember({"base", "big", "tiny"}));
  auto* precision = app.add_option("--precision", o.precision, "compute dtype (default bf16)")
                        ->check(CLI::IsMember({"bf16", "fp16", "fp32"}));
  app.add_option("--device", o.device, "cuda or cpu")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--norm", o.norm, "post (the paper) or pre")
      ->check(CLI::IsMember({"post", "pre"}));
  auto* batch =
      app.add_option("--batch", o.batch, "sentences per batch")->check(CLI::Range(1, 1 << 20));
  auto* src_len = app.add_option("--src-len", o.src_len, "source tokens per sentence")
                      ->check(CLI::Range(1, 4096));
  auto* tgt_len = app.add_option("--tgt-len", o.tgt_len, "decoder positions per sentence")
                      ->check(CLI::Range(2, 4096));
  auto* vocab =
      app.add_option("--vocab", o.vocab, "shared vocabulary size")->check(CLI::Range(8, 1 << 22));
  auto* warmup =
      app.add_option("--warmup", o.warmup, "untimed steps first")->check(CLI::Range(0, 100000));
  app.add_option("--steps", o.steps, "timed steps")->check(CLI::Range(1, 100000));
  app.add_option("--lr", o.lr, "constant learning rate");
  app.add_option("--clip", o.clip, "gradient clipping norm (0 = off)");
  app.add_option("--seed", o.seed, "seed of the ids, weights and dropout");
  app.add_option("--first-steps", o.first_steps,
                 "also print the first N steps' times, warmup included (a shape's first step runs "
                 "op by op and records its CUDA graph)")
      ->check(CLI::Range(0, 100000));
  app.add_option("--json", o.json, "also write the result as JSON to this file");
  app.add_option("--graphs", o.graphs,
                 "replay forward and backward from a CUDA graph (train.cuda_graphs; default on)")
      ->check(CLI::IsMember({"on", "off"}));
  CLI11_PARSE(app, argc, argv);
  if (o.device == "cpu") {  // the CPU computes in fp32; a tiny default batch keeps it quick
    if (precision->count() && o.precision != "fp32") {
      std::cerr << "bench-step: --precision " << o.precision << ": the CPU computes in fp32 only\n";
      return 2;
    }
    o.precision = "fp32";
    if (o.model == "tiny") {
      if (!batch->count()) o.batch = 8;
      if (!src_len->count()) o.src_len = 16;
      if (!tgt_len->count()) o.tgt_len = 16;
      if (!vocab->count()) o.vocab = 512;
      if (!warmup->count()) o.warmup = 1;
    }
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "bench-step: " << e.what() << "\n";
    return 1;
  }
}
