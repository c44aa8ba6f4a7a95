// GpuMonitor on a real GPU: NVML is found through the PCI bus id, utilisation is sampled while
// kernels run, and the peak memory covers what this process allocated.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>

#include "engine/report/device_peak.h"
#include "engine/report/gpu_monitor.h"
#include "test/reporting/gpu_busy.h"
#include "test/support/catch.h"

TEST_CASE("GpuMonitor samples utilisation and memory of the busy device",
          "[reporting][gpu][cuda]") {
  void* block = nullptr;
  const size_t block_bytes = size_t{1} << 30;
  REQUIRE(cudaMalloc(&block, block_bytes) == cudaSuccess);
  nmt::GpuMonitor monitor(std::chrono::milliseconds(100));
  monitor.start();
  REQUIRE(nmt::test::keep_gpu_busy(1.5));
  nmt::GpuUsage usage = monitor.stop();
  cudaFree(block);
  std::printf(
      "GpuMonitor: available %d (%s), %lld samples, mean %.1f%%, max %.0f%%, memory busy "
      "%.1f%%, peak %.0f MiB (%s)\n",
      usage.utilization_available ? 1 : 0, usage.utilization_reason.c_str(),
      static_cast<long long>(usage.samples), usage.mean_utilization_percent,
      usage.max_utilization_percent, usage.mean_memory_busy_percent,
      static_cast<double>(usage.peak_memory_used_bytes) / (1 << 20), usage.memory_source.c_str());
  nmt::DevicePeak peak = nmt::device_peak_for_training(nmt::Device::cuda, nmt::DType::bf16);
  std::printf("device \"%s\": peak %.1f TFLOP/s %s %s\n", peak.device_name.c_str(),
              peak.flops_per_s / 1e12, peak.precision.c_str(), peak.unknown_reason.c_str());
  CHECK(!peak.device_name.empty());
  CHECK(usage.peak_memory_used_bytes >= block_bytes);
  if (!usage.utilization_available) {
    WARN("NVML is not available here: " << usage.utilization_reason);
    CHECK(usage.memory_source == "cudaMemGetInfo");
    return;
  }
  CHECK(usage.memory_source == "NVML");
  CHECK(usage.samples >= 5);
  CHECK(usage.max_utilization_percent > 50);
  CHECK(usage.mean_utilization_percent > 0);
}
