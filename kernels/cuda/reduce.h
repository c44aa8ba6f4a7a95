// Deterministic column sums on the GPU (bias and LayerNorm parameter gradients): partial sums per
// part of the rows in a fixed grid, then the parts added in a fixed order. No float atomics.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/tensor.h"

namespace nmt::cuda {

// first[c] += sum over p in [0, parts) of partials[p * 2 * cols + c], second[c] += the same of
// column cols + c, each summed in a fixed order. partials: [parts, 2 * cols] f32 (another kernel's
// output); first, second: [cols] f32.
void accumulate_partial_sum_pair(const float* partials, int64_t parts, int64_t cols, float* first,
                                 float* second, cudaStream_t stream);
// As accumulate_partial_sum_pair with a third output from columns [2 * cols, 3 * cols):
// partials: [parts, 3 * cols] f32; first, second, third: [cols] f32. Each column is summed in the
// pair's order, so first and second get the bits the pair gives for the same partials. A null
// output takes nothing (the attention backward's bias gradients not asked for).
void accumulate_partial_sum_triple(const float* partials, int64_t parts, int64_t cols, float* first,
                                   float* second, float* third, cudaStream_t stream);

// One second pass held back (PartialSumDeferral): out[o][c] += the sum over p of
// partials[p * outputs * cols + o * cols + c], o < outputs (2 or 3), as the pair or the triple
// adds; a null out[o] takes nothing.
struct DeferredPartialSum {
  const float* partials = nullptr;
  int64_t parts = 0, cols = 0;
  int outputs = 0;
  float* out[3] = {nullptr, nullptr, nullptr};
};

// Second passes held back to one launch. While a deferral is active on the calling thread
// (DeferPartialSums), the LayerNorm backward ops (kernels/cuda/layernorm.h) and the short-sentence
// fused attention backward's bias sums (kernels/fused_attention.h) write their partial sums into
// its buffer instead of the stream's scratch and record their second pass instead of launching it
// (each through a PartialSumPass, below); flush() then runs every recorded pass in as few launches
// as the kernel's parameter space allows, each with the bits it gives alone (a column's sum depends
// on its own partials only, added in the same order). For gradients nothing reads before the flush:
// a model defers its LayerNorms' parameter and branch-bias gradients to the end of its backward,
// where about 30 launches of ~4.4 us each (a Transformer-base step on an H100) were each a step of
// the critical path. A call whose partials do not fit the buffer runs its pass at once (room is
// first come, first served: the same bits either way, only the launch is on the critical path).
// Under a deferral those ops' "+=" outputs (d_gamma, d_beta, d_branch_bias; the attention's q, k, v
// bias gradients) are added at the flush, not when the op returns, and flush() must run on the
// stream the recorded ops ran on (no events order them otherwise).
class PartialSumDeferral {
 public:
  PartialSumDeferral() = default;
  // buffer: device memory of `floats` floats, owned by the caller, alive while this is used.
  PartialSumDeferral(float* buffer, int64_t floats) : buffer_(buffer), floats_(floats) {}

  // Space for `floats` partial sums that stays untouched until the next flush() or clear(); null
  // when the buffer has no room left.
  float* take(int64_t floats);
  void record(const DeferredPartialSum& sum) { recorded_.push_back(sum); }
  // Enqueues every recorded pass on `stream` (in record order; nothing when none is recorded) and
  // frees the buffer for reuse.
  void flush(cudaStream_t stream);
  // Forgets what is recorded without running it (what a backward that threw left behind).
  void clear();
  int64_t recorded() const { return static_cast<int64_t>(recorded_.size()); }
  // How many passes the last flush() ran (tests: that the deferral took what it should).
  int64_t last_flushed() const { return last_flushed_; }

 private:
  float* buffer_ = nullptr;
  int64_t floats_ = 0, used_ = 0, last_flushed_ = 0;
  std::vector<DeferredPartialSum> recorded_;
};

// The deferral active on this thread, or null.
PartialSumDeferral* active_partial_sum_deferral();

// One op's second pass, deferred or not: the [parts, outputs * cols] f32 partials (outputs 2 or 3)
// its kernel writes go to the active deferral's buffer where it has room, else to `stream`'s
// scratch; finish(), once that kernel is enqueued, records the pass for the deferral's flush or
// runs it at once on `stream` (out[o][c] += the column sums, as the pair or the triple adds; a null
// output takes nothing). The same bits either way.
class PartialSumPass {
 public:
  PartialSumPass(int64_t parts, int64_t cols, int outputs, cudaStream_t stream);
  float* partials() const { return partials_; }
  void finish(float* first, float* second, float* third);

 private:
  PartialSumDeferral* deferral_;  // null: the pass runs at once
  float* partials_;
  int64_t parts_, cols_;
  int outputs_;
  cudaStream_t stream_;
};

// Makes `deferral` (or none, with null) the active one for its lifetime, then restores the one
// before. It does not flush.
class DeferPartialSums {
 public:
  explicit DeferPartialSums(PartialSumDeferral* deferral);
  ~DeferPartialSums();
  DeferPartialSums(const DeferPartialSums&) = delete;
  DeferPartialSums& operator=(const DeferPartialSums&) = delete;

 private:
  PartialSumDeferral* previous_;
};

// out[c] += sum over rows of matrix[r, c], in an order fixed by the shape (the same bits on every
// run, whatever the GPU's size). matrix: [rows, cols] f32, bf16 or f16 at any alignment (16-byte
// loads where the pointer is 16-byte aligned and cols a multiple of 8 for bf16 / f16, 4 for f32;
// one element at a time otherwise); out: [cols] f32. One launch (one per 4096 column tiles), with
// its partial sums in the stream's scratch and its per-tile counters in the stream's zeroed
// counters (kernels/cuda/scratch.h).
void accumulate_column_sums(const Tensor& matrix, float* out, cudaStream_t stream);

}  // namespace nmt::cuda
