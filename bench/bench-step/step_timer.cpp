// StepTimer: CUDA events or a steady clock around the phases of a training step; median and mean.
#include "bench/bench-step/step_timer.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace nmt::bench {

namespace {

void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(status));
}

double elapsed_ms(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, from, to), "cudaEventElapsedTime");
  return ms;
}

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  if (n == 0) return 0;
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace

StepTimer::StepTimer(Device device) : device_(device) {
  if (device_ != Device::cuda) return;
  for (cudaEvent_t& e : events_) check(cudaEventCreate(&e), "cudaEventCreate");
}

StepTimer::~StepTimer() {
  for (cudaEvent_t e : events_)
    if (e) cudaEventDestroy(e);
}

// The engine's ops run on the thread's current stream, the legacy default stream here, which
// orders these events with every kernel of the step.
void StepTimer::start() {
  if (device_ == Device::cuda) check(cudaEventRecord(events_[0]), "cudaEventRecord");
  times_[0] = Clock::now();
}

void StepTimer::forward_backward_done() {
  if (device_ == Device::cuda) check(cudaEventRecord(events_[1]), "cudaEventRecord");
  times_[1] = Clock::now();
}

StepSample StepTimer::finish() {
  StepSample s;
  if (device_ == Device::cuda) {
    check(cudaEventRecord(events_[2]), "cudaEventRecord");
    check(cudaEventSynchronize(events_[2]), "cudaEventSynchronize");
    s.forward_backward_ms = elapsed_ms(events_[0], events_[1]);
    s.optimizer_ms = elapsed_ms(events_[1], events_[2]);
    s.step_ms = elapsed_ms(events_[0], events_[2]);
    return s;
  }
  times_[2] = Clock::now();
  auto ms = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  s.forward_backward_ms = ms(times_[0], times_[1]);
  s.optimizer_ms = ms(times_[1], times_[2]);
  s.step_ms = ms(times_[0], times_[2]);
  return s;
}

StepStats summarize(const std::vector<StepSample>& samples) {
  StepStats st;
  if (samples.empty()) return st;
  std::vector<double> step, fb, opt;
  for (const StepSample& s : samples) {
    step.push_back(s.step_ms);
    fb.push_back(s.forward_backward_ms);
    opt.push_back(s.optimizer_ms);
    st.mean.step_ms += s.step_ms;
    st.mean.forward_backward_ms += s.forward_backward_ms;
    st.mean.optimizer_ms += s.optimizer_ms;
  }
  double n = static_cast<double>(samples.size());
  st.mean.step_ms /= n;
  st.mean.forward_backward_ms /= n;
  st.mean.optimizer_ms /= n;
  st.median = {median_of(step), median_of(fb), median_of(opt)};
  st.min_step_ms = *std::min_element(step.begin(), step.end());
  return st;
}

}  // namespace nmt::bench
