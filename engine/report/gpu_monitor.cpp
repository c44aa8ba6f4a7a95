// GpuMonitor: NVML loaded with dlopen (the few types and entry points declared here, as NVML's
// documentation gives them), the sampling thread, and the cudaMemGetInfo fallback.
#include "engine/report/gpu_monitor.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <type_traits>
#include <utility>

namespace nmt {

namespace {

// From nvml.h: an opaque device handle; nvmlReturn_t is an enum whose NVML_SUCCESS is 0.
using NvmlDevice = struct NvmlDeviceOpaque*;
using NvmlReturn = int;
constexpr NvmlReturn kNvmlSuccess = 0;
struct NvmlUtilization {  // nvmlUtilization_t
  unsigned int gpu;       // percent of the last sample period a kernel was running
  unsigned int memory;    // percent of the last sample period device memory was read or written
};
struct NvmlMemory {  // nvmlMemory_t (v1), bytes
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// "no CUDA device" or the device index of the calling thread.
int current_cuda_device(std::string& reason) {
  int count = 0, device = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaSuccess && count > 0) status = cudaGetDevice(&device);
  if (status != cudaSuccess || count == 0) {
    reason = std::string("no CUDA device (") +
             (status != cudaSuccess ? cudaGetErrorString(status) : "0 devices") + ")";
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return -1;
  }
  return device;
}

}  // namespace

struct GpuMonitor::Nvml {
  void* library = nullptr;
  NvmlDevice device = nullptr;
  bool initialized = false;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*handle_by_pci_bus_id)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*utilization_rates)(NvmlDevice, NvmlUtilization*) = nullptr;
  NvmlReturn (*memory_info)(NvmlDevice, NvmlMemory*) = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;

  ~Nvml() {
    if (initialized) shutdown();
    if (library) dlclose(library);
  }

  std::string error(const char* call, NvmlReturn status) const {
    return std::string("NVML ") + call + " failed: " + error_string(status);
  }

  // Loads the library and finds the device with this PCI bus id; "" or the reason it could not.
  std::string open(const std::string& library_name, const std::string& pci_bus_id) {
    library = dlopen(library_name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!library) return std::string("NVML not available (") + dlerror() + ")";
    auto find = [&](const char* name, auto& function) {
      function =
          reinterpret_cast<std::remove_reference_t<decltype(function)>>(dlsym(library, name));
      return function != nullptr;
    };
    for (bool found :
         {find("nvmlInit_v2", init), find("nvmlShutdown", shutdown),
          find("nvmlDeviceGetHandleByPciBusId_v2", handle_by_pci_bus_id),
          find("nvmlDeviceGetUtilizationRates", utilization_rates),
          find("nvmlDeviceGetMemoryInfo", memory_info), find("nvmlErrorString", error_string)})
      if (!found) return "NVML not available (" + library_name + " lacks an entry point)";
    if (NvmlReturn status = init(); status != kNvmlSuccess) return error("nvmlInit_v2", status);
    initialized = true;
    if (NvmlReturn status = handle_by_pci_bus_id(pci_bus_id.c_str(), &device);
        status != kNvmlSuccess)
      return error("nvmlDeviceGetHandleByPciBusId_v2", status) + " for " + pci_bus_id;
    return "";
  }
};

GpuMonitor::GpuMonitor(std::chrono::milliseconds interval, std::string nvml_library)
    : interval_(interval), nvml_library_(std::move(nvml_library)) {}

GpuMonitor::~GpuMonitor() {
  stop();
}

void GpuMonitor::start() {
  if (thread_.joinable()) return;
  std::string no_device;
  cuda_device_ = current_cuda_device(no_device);
  if (cuda_device_ < 0) {
    usage_.utilization_reason = no_device;
    return;
  }
  char pci_bus_id[64] = {};
  if (cudaDeviceGetPCIBusId(pci_bus_id, sizeof pci_bus_id, cuda_device_) != cudaSuccess) {
    usage_.utilization_reason = "cudaDeviceGetPCIBusId failed";
    (void)cudaGetLastError();
  } else {
    auto nvml = std::make_unique<Nvml>();
    usage_.utilization_reason = nvml->open(nvml_library_, pci_bus_id);
    if (usage_.utilization_reason.empty()) nvml_ = std::move(nvml);
  }
  usage_.utilization_available = nvml_ != nullptr;
  usage_.memory_source = nvml_ ? "NVML" : "cudaMemGetInfo";
  sample();
  stopping_ = false;
  thread_ = std::thread([this] { run(); });
}

GpuUsage GpuMonitor::stop() {
  if (cuda_device_ < 0 && usage_.utilization_reason.empty())
    usage_.utilization_reason = "the monitor was not started";
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
    sample();
  }
  if (usage_.utilization_available && usage_.samples == 0) {
    usage_.utilization_available = false;
    usage_.utilization_reason = "NVML gave no utilisation sample";
  }
  if (usage_.samples > 0) {
    usage_.mean_utilization_percent = utilization_sum_ / static_cast<double>(usage_.samples);
    usage_.mean_memory_busy_percent = memory_busy_sum_ / static_cast<double>(usage_.samples);
    std::vector<float> sorted = utilization_history_;
    auto p10 = sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 10);
    std::nth_element(sorted.begin(), p10, sorted.end());
    usage_.p10_utilization_percent = *p10;
  }
  return usage_;
}

GpuInterval GpuMonitor::take_interval() {
  GpuInterval taken;
  {
    std::lock_guard<std::mutex> lock(interval_mutex_);
    std::swap(taken, current_interval_);
  }
  if (taken.samples > 0) {
    taken.mean_utilization_percent /= static_cast<double>(taken.samples);
    taken.mean_memory_busy_percent /= static_cast<double>(taken.samples);
  }
  return taken;
}

void GpuMonitor::run() {
  // cudaMemGetInfo reports on this thread's current device, which starts as device 0.
  if (!nvml_ && cudaSetDevice(cuda_device_) != cudaSuccess) return;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, interval_, [this] { return stopping_; })) {
    lock.unlock();
    sample();
    lock.lock();
  }
}

void GpuMonitor::sample() {
  if (!nvml_) {
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess)
      usage_.peak_memory_used_bytes =
          std::max<uint64_t>(usage_.peak_memory_used_bytes, total_bytes - free_bytes);
    return;
  }
  NvmlUtilization rates{};
  if (nvml_->utilization_rates(nvml_->device, &rates) == kNvmlSuccess) {
    ++usage_.samples;
    utilization_sum_ += rates.gpu;
    memory_busy_sum_ += rates.memory;
    usage_.max_utilization_percent =
        std::max(usage_.max_utilization_percent, static_cast<double>(rates.gpu));
    utilization_history_.push_back(static_cast<float>(rates.gpu));
    std::lock_guard<std::mutex> lock(interval_mutex_);
    current_interval_.min_utilization_percent =
        current_interval_.samples == 0
            ? rates.gpu
            : std::min<double>(current_interval_.min_utilization_percent, rates.gpu);
    ++current_interval_.samples;
    current_interval_.mean_utilization_percent += rates.gpu;  // a sum until take_interval()
    current_interval_.mean_memory_busy_percent += rates.memory;
  }
  NvmlMemory memory{};
  if (nvml_->memory_info(nvml_->device, &memory) == kNvmlSuccess)
    usage_.peak_memory_used_bytes = std::max<uint64_t>(usage_.peak_memory_used_bytes, memory.used);
}

}  // namespace nmt
