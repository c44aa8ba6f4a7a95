// Finiteness checks of checkpointed tensors: a diverged run's NaN or infinite weights are never
// saved, and a checkpoint holding them is never loaded (its every later step would be skipped).
#pragma once

#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint_files.h"
#include "engine/model/param_store.h"

namespace nmt {

// Thrown when weights or Adam moments hold NaN or infinity (a CheckpointError: one message).
class NonFiniteTensorError : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

// "" when every value of `flat` (laid out like `params`) is finite; else names the first
// parameter (with `suffix`, e.g. ".exp_avg") that is not, the element and the value.
std::string describe_non_finite(const std::vector<float>& flat,  // [params] f32
                                const ParamStore& params, const std::string& suffix);

}  // namespace nmt
