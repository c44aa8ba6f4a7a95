// The start-up all-reduce probe: one warm-up, then the median of a few timed all-reduces.
#include "engine/train/all_reduce_probe.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/cuda/check.h"

namespace nmt {

namespace {

// The probe's buffer: host memory, or device memory freed on every exit path.
class ProbeBuffer {
 public:
  ProbeBuffer(Device device, int64_t elements) : device_(device) {
    if (device == Device::cuda) {
      CUDA_CHECK(cudaMalloc(&device_data_, static_cast<size_t>(elements) * sizeof(float)));
      CUDA_CHECK(cudaMemset(device_data_, 0, static_cast<size_t>(elements) * sizeof(float)));
      CUDA_CHECK(cudaDeviceSynchronize());
    } else {
      host_.assign(static_cast<size_t>(elements), 0.0f);
    }
    tensor_ = Tensor(device == Device::cuda ? device_data_ : host_.data(), DType::f32, device,
                     {elements});
  }
  ~ProbeBuffer() {
    if (device_data_) cudaFree(device_data_);  // nothing useful to do with a failure here
  }
  ProbeBuffer(const ProbeBuffer&) = delete;
  ProbeBuffer& operator=(const ProbeBuffer&) = delete;
  const Tensor& tensor() const { return tensor_; }

 private:
  Device device_;
  void* device_data_ = nullptr;
  std::vector<float> host_;
  Tensor tensor_;
};

}  // namespace

AllReduceProbe probe_all_reduce(Communicator& comm, Device device, uint64_t bytes, int iterations) {
  AllReduceProbe probe;
  probe.backend = comm.name();
  probe.ranks = comm.size();
  auto elements = static_cast<int64_t>(bytes / sizeof(float));
  if (elements <= 0 || iterations <= 0 || comm.size() < 2) return probe;
  probe.bytes = static_cast<uint64_t>(elements) * sizeof(float);
  ProbeBuffer buffer(device, elements);
  std::vector<double> seconds;
  for (int i = 0; i <= iterations; ++i) {  // i == 0 warms up (connections, NCCL channels)
    std::unique_ptr<CommRequest> request =
        comm.start_all_reduce_sum(buffer.tensor(), "bandwidth probe all-reduce");
    request->wait();
    if (i > 0) seconds.push_back(request->seconds());
  }
  probe.iterations = iterations;
  std::nth_element(seconds.begin(), seconds.begin() + iterations / 2, seconds.end());
  probe.median_seconds = seconds[static_cast<size_t>(iterations / 2)];
  if (probe.median_seconds > 0) {
    probe.algbw_gb_per_s = static_cast<double>(probe.bytes) / probe.median_seconds / 1e9;
    probe.busbw_gb_per_s = probe.algbw_gb_per_s * 2.0 * (probe.ranks - 1) / probe.ranks;
  }
  return probe;
}

nlohmann::json to_json(const AllReduceProbe& p) {
  return {{"backend", p.backend},
          {"ranks", p.ranks},
          {"bytes", p.bytes},
          {"iterations", p.iterations},
          {"median_seconds", p.median_seconds},
          {"algbw_gb_per_s", p.algbw_gb_per_s},
          {"busbw_gb_per_s", p.busbw_gb_per_s}};
}

}  // namespace nmt
