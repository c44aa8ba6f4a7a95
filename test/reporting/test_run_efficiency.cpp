// The efficiency parts of the end-of-run report: counted FLOPs against a hand computation, the
// peak table, MFU, the GPU monitor without NVML, and the dataset statistics of a prep directory.
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "data/shard.h"
#include "engine/model/flop_count.h"
#include "engine/report/dataset_stats.h"
#include "engine/report/device_peak.h"
#include "engine/report/gpu_monitor.h"
#include "engine/report/run_report.h"
#include "test/checkpoint/python_oracle.h"
#include "test/support/catch.h"

using nmt::test::ScratchDir;

TEST_CASE("forward_matmul_flops matches a hand count of every product", "[reporting][flops]") {
  nmt::ModelShape shape;
  shape.vocab = 10;
  shape.d_model = 4;
  shape.heads = 2;
  shape.ffn_dim = 8;
  shape.encoder_layers = 1;
  shape.decoder_layers = 1;
  nmt::BatchDims dims{2, 3, 5};  // B = 2, S = 3, T = 5: 6 source rows, 10 target rows
  // Encoder layer: q/k/v/out 4 * 2*6*4*4 = 768; scores + context 2 * 2*2*3*3*4 = 288;
  // fc1 + fc2 2 * 2*6*4*8 = 768.
  const double encoder = 768 + 288 + 768;
  // Decoder layer: self q/k/v/out 4 * 2*10*4*4 = 1280, scores + context 2 * 2*2*5*5*4 = 800;
  // cross q/out 2 * 2*10*4*4 = 640, k/v on the encoder output 2 * 2*6*4*4 = 384, scores +
  // context 2 * 2*2*5*3*4 = 480; fc1 + fc2 2 * 2*10*4*8 = 1280.
  const double decoder = 1280 + 800 + 640 + 384 + 480 + 1280;
  const double output = 2 * 10 * 4 * 10;                                        // [10, 4] x [4, 10]
  CHECK(nmt::forward_matmul_flops(shape, dims) == encoder + decoder + output);  // 7488
  CHECK(nmt::training_flops(shape, dims) == 3 * 7488.0);

  shape.encoder_layers = 3;  // layers add linearly
  shape.decoder_layers = 2;
  CHECK(nmt::forward_matmul_flops(shape, dims) == 3 * encoder + 2 * decoder + output);

  nmt::Batch batch;
  batch.sentences = 2;
  batch.src_len = 3;
  batch.tgt_len = 5;
  nmt::BatchDims from_batch = nmt::batch_dims(batch);
  CHECK(from_batch.sentences == 2);
  CHECK(from_batch.src_len == 3);
  CHECK(from_batch.tgt_len == 5);
}

TEST_CASE("the peak table knows the Hopper cards by their CUDA names", "[reporting][mfu]") {
  using nmt::MatmulPrecision;
  CHECK(nmt::peak_flops_per_s("NVIDIA H100 80GB HBM3", MatmulPrecision::bf16) == 989.4e12);
  CHECK(nmt::peak_flops_per_s("NVIDIA H100 80GB HBM3", MatmulPrecision::tf32) == 494.7e12);
  CHECK(nmt::peak_flops_per_s("NVIDIA H200", MatmulPrecision::fp32) == 66.9e12);
  CHECK(nmt::peak_flops_per_s("NVIDIA H100 PCIe", MatmulPrecision::bf16) == 756.5e12);
  CHECK(nmt::peak_flops_per_s("NVIDIA GH200 480GB", MatmulPrecision::bf16) == 989.4e12);
  CHECK(!nmt::peak_flops_per_s("NVIDIA GeForce GTX 1080", MatmulPrecision::fp32));
  // The engine's fp32 products are plain fp32 (CUBLAS_COMPUTE_32F, no TF32).
  CHECK(nmt::matmul_precision_for(nmt::DType::f32) == MatmulPrecision::fp32);
  CHECK(nmt::matmul_precision_for(nmt::DType::bf16) == MatmulPrecision::bf16);
  CHECK(nmt::matmul_precision_for(nmt::DType::f16) == MatmulPrecision::bf16);
  nmt::DevicePeak cpu = nmt::device_peak_for_training(nmt::Device::cpu, nmt::DType::f32);
  CHECK(cpu.flops_per_s == 0);
  CHECK(cpu.unknown_reason == "CPU run");
}

TEST_CASE("the run report carries MFU, GPU usage and dataset statistics", "[reporting][mfu]") {
  nmt::RunReport r;
  r.steps = 10;
  r.train_seconds = 2;
  r.train_flops = 66.9e12;  // half the peak for 2 s
  r.device = nmt::Device::cpu;
  nlohmann::json cpu = nmt::to_json(r);
  CHECK(cpu["mfu"].is_null());
  CHECK(cpu["mfu_reason"] == "CPU run");
  CHECK(cpu["flops_per_s"] == 33.45e12);
  CHECK(cpu["gpu"].is_null());
  CHECK(cpu["dataset"].is_null());
  CHECK(nmt::format_run_report(r).find("MFU n/a (CPU run): 33.5 TFLOP/s counted") !=
        std::string::npos);

  r.device = nmt::Device::cuda;
  r.peak = {"NVIDIA H100 80GB HBM3", "fp32 (no tensor cores)", 66.9e12, ""};
  nmt::GpuUsage usage;
  usage.samples = 4;
  usage.utilization_available = true;
  usage.mean_utilization_percent = 87.5;
  usage.max_utilization_percent = 100;
  usage.peak_memory_used_bytes = 3ull << 30;
  usage.memory_source = "NVML";
  r.gpu_usage = usage;
  r.dataset = nmt::DatasetStats{"prep", "report.json", 5, 50, 60, 200, 210, 1000};
  nlohmann::json gpu = nmt::to_json(r);
  INFO(gpu.dump(2));
  CHECK(gpu["mfu"].get<double>() == Approx(0.5));
  CHECK(gpu["mfu_reason"].is_null());
  CHECK(gpu["device_name"] == "NVIDIA H100 80GB HBM3");
  CHECK(gpu["gpu"]["utilization_mean_percent"] == 87.5);
  CHECK(gpu["gpu"]["peak_device_memory_bytes"] == 3ull << 30);
  CHECK(gpu["dataset"]["target_tokens"] == 60);
  CHECK(gpu["dataset"]["source_bytes"] == 200);
  std::string text = nmt::format_run_report(r);
  INFO(text);
  CHECK(text.find("MFU 50.0%: 33.5 TFLOP/s counted of 66.9 TFLOP/s peak") != std::string::npos);
  CHECK(
      text.find("GPU utilisation 87.5% mean, 100% max (4 samples); peak device memory 3072 MiB") !=
      std::string::npos);
  CHECK(text.find("dataset: 5 pairs, 50 source / 60 target tokens") != std::string::npos);

  r.peak = {"Some Future GPU", "fp32 (no tensor cores)", 0, "no peak FLOP/s known"};
  CHECK(nmt::to_json(r)["mfu"].is_null());
  CHECK(nmt::to_json(r)["mfu_reason"] == "no peak FLOP/s known");
}

TEST_CASE("GpuMonitor without NVML says so and still stops cleanly", "[reporting][gpu]") {
  nmt::GpuMonitor monitor(std::chrono::milliseconds(10), "libnvidia-ml-absent.so.1");
  monitor.start();
  nmt::GpuUsage usage = monitor.stop();
  CHECK(!usage.utilization_available);
  CHECK(usage.samples == 0);
  INFO(usage.utilization_reason);
  // With a GPU the reason is NVML's absence; without one, the missing device comes first.
  bool nvml_reason = usage.utilization_reason.starts_with("NVML not available");
  bool device_reason = usage.utilization_reason.starts_with("no CUDA device");
  CHECK((nvml_reason || device_reason));
  CHECK(usage.memory_source == (device_reason ? "" : "cudaMemGetInfo"));
  CHECK(monitor.stop().samples == 0);  // a second stop returns the same summary
}

TEST_CASE("dataset statistics come from report.json, else from the shard headers",
          "[reporting][dataset]") {
  ScratchDir dir("nmt-dataset-stats");
  nmt::DataConfig data;
  CHECK(!nmt::read_dataset_stats(data));  // synthetic
  data.train = dir.path();
  for (const char* side : {"src", "tgt"}) {
    nmt::ShardWriter shard(dir.path() + "/train." + side + ".shard", 20, 7);
    shard.add(std::vector<int32_t>{5, 6, 7});
    shard.add(std::vector<int32_t>{8});
    shard.finish();
  }
  std::optional<nmt::DatasetStats> from_shards = nmt::read_dataset_stats(data);
  REQUIRE(from_shards);
  CHECK(from_shards->origin == "shard headers");
  CHECK(from_shards->pairs == 2);
  CHECK(from_shards->source_tokens == 4);
  CHECK(!from_shards->source_bytes);
  CHECK(from_shards->shard_bytes > 0);

  std::ofstream(dir.path() + "/report.json") << R"({"splits": {"train": {"pairs_kept": 2,
      "source": {"tokens": 4, "bytes": 11, "shard_bytes": 100},
      "target": {"tokens": 4, "bytes": 12, "shard_bytes": 101}}}})";
  std::optional<nmt::DatasetStats> from_report = nmt::read_dataset_stats(data);
  REQUIRE(from_report);
  CHECK(from_report->origin == "report.json");
  CHECK(from_report->target_bytes == 12);
  CHECK(from_report->shard_bytes == 201);
  CHECK(nmt::to_json(from_report)["directory"] == dir.path());

  data.train = dir.path() + "/missing";
  std::string error = nmt::test::error_of([&] { nmt::read_dataset_stats(data); });
  CHECK(error.find("missing") != std::string::npos);
}
