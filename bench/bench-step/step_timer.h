// StepTimer: the wall time of one training step and its two phases (forward+backward, optimizer),
// with CUDA events on the GPU (synchronising at the end of every step) or a steady clock on the
// CPU.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <vector>

#include "kernels/tensor.h"

namespace nmt::bench {

struct StepSample {
  double step_ms = 0;
  double forward_backward_ms = 0;
  double optimizer_ms = 0;
};

class StepTimer {
 public:
  explicit StepTimer(Device device);
  ~StepTimer();
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

  void start();                  // before zero_grads
  void forward_backward_done();  // after forward_backward
  StepSample finish();           // after the optimizer step; waits for the device

 private:
  using Clock = std::chrono::steady_clock;
  Device device_;
  cudaEvent_t events_[3] = {nullptr, nullptr, nullptr};  // start, forward+backward done, end
  Clock::time_point times_[3];
};

// Median and mean of the recorded samples, per field.
struct StepStats {
  StepSample median, mean;
  double min_step_ms = 0;
};
StepStats summarize(const std::vector<StepSample>& samples);

}  // namespace nmt::bench
