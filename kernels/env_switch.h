// EnvSwitch: a process-wide on/off setting that code can set and the environment can preset.
// Until set() decides it, the first get() reads the environment variable once: "1" turns it on,
// "0" off, anything else (or unset) leaves the default. The engine's and the kernels' NMT_* A/B
// switches are these (each beside the code it switches; docs/cuda.md names them).
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
      const int from_environment = text == "1" ? 1 : text == "0" ? 0 : (default_on_ ? 1 : 0);
      // Only an undecided setting takes it: a set() that ran meanwhile stays.
      int undecided = -1;
      setting = setting_.compare_exchange_strong(undecided, from_environment) ? from_environment
                                                                              : undecided;
    }
    return setting == 1;
  }

 private:
  const char* variable_;
  bool default_on_;
  std::atomic<int> setting_{-1};  // -1: not decided yet, else 0 or 1
};

}  // namespace nmt
