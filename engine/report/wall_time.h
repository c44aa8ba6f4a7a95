// Wall time on the steady clock, in seconds: what the runs and tools report their phases in
// (training steps and evaluations, translation progress).
#pragma once

#include <chrono>

namespace nmt {

using SteadyClock = std::chrono::steady_clock;

inline double seconds_since(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

}  // namespace nmt
