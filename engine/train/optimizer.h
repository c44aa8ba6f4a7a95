// Optimizer: Adam (or LazyAdam for embedding tables) over the flat parameter store, with gradient
// normalisation by the global target-token count and global-norm clipping.
#pragma once

#include <vector>

#include "engine/config/config.h"
#include "engine/model/arena.h"
#include "engine/model/param_store.h"

namespace nmt {

struct OptimizerStepStats {
  double grad_norm = 0;  // of the normalised gradient, before clipping
  bool skipped = false;  // non-finite gradient: parameters untouched
};

class Optimizer {
 public:
  Optimizer(ParamStore& params, const OptimizerConfig& cfg, Device device);

  // One update at 1-based `step`. The gradient buffer holds sums over `tokens` target tokens;
  // it is divided by `tokens`, clipped to `clip_norm` (0 = off) and applied with `lr`. The same as
  // enqueue_step and then finish_step.
  OptimizerStepStats step(int64_t step, double lr, double tokens, double clip_norm);
  // The update, enqueued on the current stream on the GPU: the gradient norm and the clipping
  // factor stay on the device for the update to read (no host round trip); a non-finite norm
  // leaves the parameters and moments untouched.
  void enqueue_step(int64_t step, double lr, double tokens, double clip_norm);
  // The last enqueued step's statistics (synchronises the current stream on the GPU).
  OptimizerStepStats finish_step() const;

  Tensor first_moment() const { return m_.flat(); }   // [params] f32
  Tensor second_moment() const { return v_.flat(); }  // [params] f32

 private:
  // A run of parameters updated together: dense Adam, or one LazyAdam table.
  struct Segment {
    int64_t offset, numel, rows, cols;
    bool lazy;
  };

  ParamStore& params_;
  OptimizerConfig cfg_;
  Arena arena_;
  Buffer m_, v_;
  Buffer clip_;  // [kGradClipWords] i32: the last step's GradClip record
  std::vector<Segment> segments_;
};

}  // namespace nmt
