// keep_gpu_busy: back-to-back spinning kernels on the current device (for the GpuMonitor test).
#pragma once

namespace nmt::test {

// Runs for about `seconds`; false when a CUDA call failed.
bool keep_gpu_busy(double seconds);

}  // namespace nmt::test
