// resolve_train_device: auto -> cuda or cpu, the no-GPU message, the CPU's fp32 fallbacks.
#include "engine/train/train_device.h"

#include <stdexcept>

#include "engine/model/cuda_device_check.h"

namespace nmt {

namespace {

// The config a machine without a GPU should train, and the override that keeps the user's config.
constexpr const char* kCpuAdvice =
    "train on the CPU with --set train.device=cpu (or leave train.device at auto), or start from "
    "configs/bible-en-es-cpu.json, a model sized for the CPU";

}  // namespace

ResolvedDevice resolve_train_device(const RunConfig& cfg, int visible_gpus,
                                    const std::string& no_gpu_reason) {
  ResolvedDevice out{cfg, {}};
  TrainConfig& train = out.cfg.train;
  const std::string gpus = std::to_string(visible_gpus) + (visible_gpus == 1 ? " GPU" : " GPUs");
  if (!train.device) {
    train.device = visible_gpus > 0 ? Device::cuda : Device::cpu;
    out.lines.push_back(visible_gpus > 0
                            ? "device: cuda (train.device auto: " + gpus + " visible)"
                            : "device: cpu (train.device auto: no GPU visible: " + no_gpu_reason +
                                  "; configs/bible-en-es-cpu.json is a model sized for the CPU)");
  } else if (*train.device == Device::cuda && visible_gpus == 0) {
    throw std::runtime_error("train.device = cuda: no GPU was found (" + no_gpu_reason + "); " +
                             kCpuAdvice);
  } else {
    out.lines.push_back("device: " + std::string(config_name(*train.device)) +
                        (*train.device == Device::cuda ? " (" + gpus + " visible)" : ""));
  }
  if (*train.device != Device::cpu) return out;
  // The CPU backend computes and all-reduces in fp32; a GPU config run there still trains.
  if (train.precision != DType::f32) {
    out.lines.push_back("note: train.precision " + std::string(config_name(train.precision)) +
                        " -> fp32: the cpu device computes in fp32");
    train.precision = DType::f32;
  }
  if (out.cfg.dist.allreduce_dtype != DType::f32) {
    out.lines.push_back("note: dist.allreduce_dtype " +
                        std::string(config_name(out.cfg.dist.allreduce_dtype)) +
                        " -> fp32: the cpu device all-reduces in fp32");
    out.cfg.dist.allreduce_dtype = DType::f32;
  }
  return out;
}

ResolvedDevice resolve_train_device(const RunConfig& cfg) {
  std::string reason;
  const int gpus = visible_cuda_devices(&reason);
  return resolve_train_device(cfg, gpus, reason);
}

}  // namespace nmt
