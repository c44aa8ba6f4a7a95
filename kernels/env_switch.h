// EnvSwitch: a process-wide on/off setting that code can set and the environment can preset.
// Until set() decides it, the first get() reads the environment variable once: "1" turns it on,
// "0" off, anything else (or unset) leaves the default. Used by NMT_BIAS_GRAD_EPILOGUE,
// NMT_GEMM_AUTOTUNE (kernels/cuda/blas.h) and NMT_DECODE_GRAPHS (engine/decode/step_graphs.h).
#pragma once

#include <atomic>
#include <cstdlib>
#include <string>

namespace nmt {

class EnvSwitch {
 public:
  EnvSwitch(const char* variable, bool default_on) : variable_(variable), default_on_(default_on) {}
  EnvSwitch(const EnvSwitch&) = delete;
  EnvSwitch& operator=(const EnvSwitch&) = delete;

  void set(bool on) { setting_.store(on ? 1 : 0); }

  bool get() {
    int setting = setting_.load();
    if (setting < 0) {
      const char* value = std::getenv(variable_);
      const std::string text = value != nullptr ? value : "";
      setting = text == "1" ? 1 : text == "0" ? 0 : (default_on_ ? 1 : 0);
      setting_.store(setting);
    }
    return setting == 1;
  }

 private:
  const char* variable_;
  bool default_on_;
  std::atomic<int> setting_{-1};  // -1: not decided yet, else 0 or 1
};

}  // namespace nmt
