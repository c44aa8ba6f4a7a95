// Optimizer: Adam (or LazyAdam for embedding tables) over the flat parameter store, with gradient
// normalisation by the global target-token count and global-norm clipping.
#pragma once

#include <vector>

#include "engine/config/config.h"
#include "engine/model/arena.h"
#include "engine/model/param_store.h"
#include "kernels/optimizer.h"

namespace nmt {

struct OptimizerStepStats {
  double grad_norm = 0;  // of the normalised gradient, before clipping
  bool skipped = false;  // non-finite gradient: parameters untouched
};

class Optimizer {
 public:
  Optimizer(ParamStore& params, const OptimizerConfig& cfg, Device device);

  // One update at 1-based `step`. The gradient buffer holds sums over `tokens` target tokens;
  // it is divided by `tokens`, clipped to `clip_norm` (0 = off) and applied with `lr`.
  OptimizerStepStats step(int64_t step, double lr, double tokens, double clip_norm);

  Tensor first_moment() const { return m_.flat(); }   // [params] f32
  Tensor second_moment() const { return v_.flat(); }  // [params] f32

  // ---- The staged step: the update during the backward ----
  // step() runs after the whole backward: it needs the whole gradient's norm first (to clip, and
  // to skip a non-finite step). Without clipping, each backward stage's parameters can be updated
  // as soon as their gradients are final instead, on the same stream, where the update's memory
  // traffic overlaps the backward's products of the stages below (and a CUDA graph of the step
  // captures it). The updates are step()'s, bit for bit; the step's values (lr, the token count)
  // come from device memory written by begin_staged_step. A stage whose gradient holds a
  // non-finite value is left as it is, and so is every stage after it in that step; the stages
  // before it were already updated (step() leaves every parameter as it is then).
  //
  // Plans the staged step over the model's backward stages (Transformer::backward_stages(): the
  // parameters whose gradients are final together, in the order the backward finishes them).
  void plan_stages(const std::vector<std::vector<const Param*>>& stages);
  bool staged() const { return !stage_ranges_.empty(); }
  // Before the step's backward: its values (as step(step, lr, tokens, 0) takes them) into the gate.
  void begin_staged_step(int64_t step, double lr, double tokens);
  // Enqueues stage `stage`'s gradient check and update on the current stream.
  void update_stage(size_t stage);
  // After the backward: the step's gradient norm (of the normalised gradient) and whether a stage
  // was skipped. Synchronises the current stream.
  OptimizerStepStats finish_staged_step(double tokens);

 private:
  // A run of one stage's parameters updated together (a Segment's piece), with the partial sums
  // of its gradient check at [parts_offset, parts_offset + parts) of partials_.
  struct StagedRange {
    int64_t offset, numel, rows, cols;
    bool lazy;
    int64_t parts_offset, parts;
  };
  AdamHyper hyper(int64_t step, double lr) const;

  // A run of parameters updated together: dense Adam, or one LazyAdam table.
  struct Segment {
    int64_t offset, numel, rows, cols;
    bool lazy;
  };

  ParamStore& params_;
  OptimizerConfig cfg_;
  Arena arena_;
  Buffer m_, v_;
  std::vector<Segment> segments_;
  std::vector<std::vector<StagedRange>> stage_ranges_;  // by stage
  Arena staged_arena_;
  Buffer gate_, partials_;  // f32 [kAdamGateWords], f32 [every range's parts]
};

}  // namespace nmt
