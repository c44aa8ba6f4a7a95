// One clear message when a program is asked to run on the GPU and the machine has none (no
// device, no driver, or a driver older than the CUDA runtime): instead of the first CUDA call's
// error deep inside the engine. And the count behind `auto` device choices.
#pragma once

#include <string>

namespace nmt {

// The GPUs the CUDA runtime sees; 0 when none, with CUDA's reason in words in `reason` ("0
// devices", "no CUDA-capable device is detected", ...). Clears CUDA's sticky error.
int visible_cuda_devices(std::string* reason = nullptr);

// Throws std::runtime_error "<setting>: no GPU was found (<CUDA's reason>); <how_to_use_cpu>"
// when the CUDA runtime sees no device.
void require_cuda_device(const std::string& setting, const std::string& how_to_use_cpu);

}  // namespace nmt
