// Where a run trains: `train.device` auto resolved against the machine (cuda when a GPU is
// visible, else cpu), an explicit cuda without a GPU turned into one message that names the way to
// the CPU, and the CPU's fp32 (bf16/fp16 precision and all-reduce dtype fall back, with a note).
#pragma once

#include <string>
#include <vector>

#include "engine/config/config.h"

namespace nmt {

struct ResolvedDevice {
  RunConfig cfg;                   // train.device set; precision and all-reduce dtype fit it
  std::vector<std::string> lines;  // for start-up: "device: cpu (auto: ...)", fallback notes
};

// Pure (no CUDA call): `visible_gpus` GPUs on this machine, `no_gpu_reason` CUDA's words when 0.
// Throws std::runtime_error when train.device is cuda and visible_gpus is 0.
ResolvedDevice resolve_train_device(const RunConfig& cfg, int visible_gpus,
                                    const std::string& no_gpu_reason);

// The same, asking the CUDA runtime how many GPUs it sees (engine/model/cuda_device_check.h).
ResolvedDevice resolve_train_device(const RunConfig& cfg);

}  // namespace nmt
