// GpuMonitor: a background thread that samples the current CUDA device's utilisation and memory
// through NVML while training runs, for the end-of-run report. NVML is dlopen()ed at run time, so
// nothing links against the driver: without it, utilisation is unknown (with the reason) and the
// peak memory comes from cudaMemGetInfo instead.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace nmt {

struct GpuUsage {
  int64_t samples = 0;  // utilisation samples taken
  bool utilization_available = false;
  std::string utilization_reason;       // why not, e.g. "NVML not available: ..."
  double mean_utilization_percent = 0;  // NVML "gpu": time a kernel was running in the last period
  double max_utilization_percent = 0;
  double p10_utilization_percent = 0;   // 10th percentile of the samples: how low it dips
  double mean_memory_busy_percent = 0;  // NVML "memory": time device memory was read or written
  uint64_t peak_memory_used_bytes = 0;  // the whole device (every process on it), at the samples
  std::string memory_source;            // "NVML", "cudaMemGetInfo", or "" (no CUDA device)
};

// The samples taken since the previous GpuMonitor::take_interval() (for utilisation over time).
struct GpuInterval {
  int64_t samples = 0;  // 0: no utilisation sample in the interval (or NVML unavailable)
  double mean_utilization_percent = 0, min_utilization_percent = 0;
  double mean_memory_busy_percent = 0;
};

class GpuMonitor {
 public:
  // Samples the calling thread's current CUDA device every `interval`. `nvml_library` is the name
  // passed to dlopen (tests pass a missing one).
  explicit GpuMonitor(std::chrono::milliseconds interval = std::chrono::milliseconds(200),
                      std::string nvml_library = "libnvidia-ml.so.1");
  ~GpuMonitor();  // stops the thread
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  // Opens NVML, maps the CUDA device to an NVML device by PCI bus id, takes a first sample and
  // starts the thread. Never throws for a missing driver or device: the usage says why instead.
  void start();
  // Takes a last sample, joins the thread and returns the summary. Repeated calls return it again.
  GpuUsage stop();
  // The utilisation since the last call (or start()); safe while the thread samples.
  GpuInterval take_interval();

 private:
  struct Nvml;
  void sample();
  void run();

  std::chrono::milliseconds interval_;
  std::string nvml_library_;
  std::unique_ptr<Nvml> nvml_;
  int cuda_device_ = -1;  // -1: no CUDA device
  GpuUsage usage_;        // written by the thread while it runs, read after join
  double utilization_sum_ = 0, memory_busy_sum_ = 0;
  std::vector<float> utilization_history_;  // every sample, for the percentile
  std::mutex interval_mutex_;               // guards current_interval_ against take_interval()
  GpuInterval current_interval_;            // sums until take_interval() turns them into means
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace nmt
