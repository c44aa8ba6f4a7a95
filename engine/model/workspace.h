// Workspace: gradient scratch buffers shared by every layer during backward (layers run one at a
// time, so one set suffices). Each user owns fixed slots, documented here, so nothing is clobbered.
#pragma once

#include "engine/model/arena.h"
#include "engine/model/weight_grad_queue.h"
#include "kernels/op_checks.h"

namespace nmt {

struct Workspace {
  // Sublayer (norm/residual wrapper) slots.
  Buffer s1, s2;  // [max_rows, d_model], all in the activation dtype (s1: pre-norm only)
  // AttentionBlock slots: a1 [max_rows, d_model]; a_proj [3 * max_rows * d_model], the gradients
  // of the q, k and v projections in the block's layout (AttentionBlock::projections). Keys and
  // values projected for all decoder layers at once keep their gradients outside the workspace
  // (CrossKeysValues' d_kv_all, alive across the whole decoder backward).
  Buffer a1, a_proj;
  // FeedForwardBlock slot.
  Buffer f1;  // [max_rows, ffn_dim]
  // Where the blocks may hold weight-gradient products back to the end of the model's backward
  // (null, or off: none are held). Set by the model that owns this workspace.
  WeightGradQueue* dw_queue = nullptr;
  // dw_queue where it is set and on, else null.
  WeightGradQueue* open_queue() const {
    return dw_queue != nullptr && dw_queue->enabled() ? dw_queue : nullptr;
  }

  // Whether `t` lies in one of the shared slots above (a layer after this one overwrites it, so a
  // product that reads it cannot wait in dw_queue).
  bool holds(const Tensor& t) const {
    for (const Buffer* b : {&s1, &s2, &a1, &a_proj, &f1})
      if (b->capacity > 0 && detail::overlaps(t, b->flat())) return true;
    return false;
  }

  void plan(Arena& arena, int64_t max_rows, int64_t d_model, int64_t ffn_dim, DType dtype) {
    int64_t n = max_rows * d_model;
    s1 = arena.allocate("ws.s1", dtype, n);
    s2 = arena.allocate("ws.s2", dtype, n);
    a1 = arena.allocate("ws.a1", dtype, n);
    a_proj = arena.allocate("ws.a_proj", dtype, 3 * n);
    f1 = arena.allocate("ws.f1", dtype, max_rows * ffn_dim);
  }
};

}  // namespace nmt
