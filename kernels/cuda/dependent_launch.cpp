// The switch of programmatic dependent launch (dependent_launch.cuh).
#include "kernels/env_switch.h"

namespace nmt::cuda {

bool dependent_launch_enabled() {
  static EnvSwitch dependent_launch("NMT_DEPENDENT_LAUNCH", /*default_on=*/true);
  return dependent_launch.get();
}

}  // namespace nmt::cuda
