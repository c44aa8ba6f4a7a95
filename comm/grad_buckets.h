// GradBuckets: the bucketed, overlapped all-reduce of the flat gradient buffer. Buckets are
// contiguous element ranges filled from the front (parameters are laid out in the order backward
// finishes them); a bucket's all-reduce starts the moment its last gradient is marked ready, so
// communication overlaps the rest of backward. finish() leaves the SUM over ranks in the buffer.
//
// Per step (also see docs/comm.md):
//   buckets.reset();                          // optional: start of step, a no-op after finish()
//   ... backward; after each parameter's gradient is final: buckets.mark_ready(p.offset, p.numel);
//   buckets.finish();                         // grads = sum over ranks; stats() describe the step
// Gradient accumulation: run the first micro-batches without marking anything (their gradients
// only accumulate locally) and mark ready only during the backward of the last micro-batch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "comm/communicator.h"
#include "kernels/tensor.h"

namespace nmt {

struct ElementRange {
  int64_t begin = 0;
  int64_t end = 0;  // exclusive
  int64_t size() const { return end - begin; }
};

// Splits [0, total) into buckets of at most bucket_bytes, from the front. With `params` (element
// ranges that tile [0, total), in any order) buckets hold whole parameters: a bucket closes when
// the next parameter would not fit, and a parameter larger than a bucket is cut into bucket-sized
// pieces. Without, size alone decides. Piece sizes are multiples of 64 elements when a bucket holds
// at least that many, so GPU buckets start 256-byte aligned. Throws CommError if params don't tile.
std::vector<ElementRange> plan_buckets(int64_t total, size_t element_bytes, size_t bucket_bytes,
                                       std::vector<ElementRange> params = {});

struct GradExchangeStats {
  int buckets = 0;                 // buckets in the layout
  int collectives = 0;             // requests started (one per bucket)
  int64_t bytes = 0;               // bytes this rank all-reduced
  double comm_seconds = 0;         // sum over the collectives of their durations
  double exposed_seconds = 0;      // communication not hidden behind backward (see below)
  double finish_wait_seconds = 0;  // host time finish() blocked
  double algbw_gbps = 0;           // bytes / comm_seconds
  double busbw_gbps = 0;           // algbw * 2(n-1)/n, the nccl-tests bus bandwidth
};
// exposed_seconds: on the GPU, how long the last all-reduce ran past the end of the backward work
// on the compute stream (CUDA events, so host run-ahead does not count); on the CPU, the time
// finish() blocked.

class GradBuckets {
 public:
  static constexpr size_t kDefaultBucketBytes = size_t{25} << 20;  // 25 MiB, as PyTorch DDP

  // grads: the flat gradient buffer ([n] f32, or any dtype the communicator sums), on the device
  // the communicator serves. params: see plan_buckets. wire_dtype: the dtype gradients travel in
  // (default: grads' own). A 16-bit wire for f32 gradients (GPU only) converts each bucket into a
  // wire buffer on the compute stream before its all-reduce, and the sums back into grads in
  // finish(); buckets are then sized in wire bytes.
  GradBuckets(Communicator& comm, const Tensor& grads /* [n] */,
              size_t bucket_bytes = kDefaultBucketBytes, std::vector<ElementRange> params = {},
              std::optional<DType> wire_dtype = std::nullopt);
  ~GradBuckets();  // completes any all-reduce still in flight
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  // GPU: the stream backward writes gradients on (default nullptr: nmt::cuda::current_stream()
  // at each call). The all-reduce of a bucket waits for that stream's work on the GPU.
  void set_compute_stream(cudaStream_t stream) { compute_stream_ = stream; }

  // Elements [offset, offset + count) hold their final local gradient for this step. Any order;
  // each element exactly once per step (twice throws CommError). Buckets start in index order: a
  // complete bucket starts once all buckets before it have started. Also polls the ones in flight.
  void mark_ready(int64_t offset, int64_t count);
  // How many buckets, from the first, the (disjoint) `ranges` cover completely: once every range
  // is marked, buckets [0, result) have started. Independent of this step's marks, so a caller
  // that holds finished gradients back can ask it where it cannot mark (a graph capture).
  int leading_buckets_filled(const std::vector<ElementRange>& ranges) const;
  // Marks every element not marked yet this step (no overlap: a training loop without per-parameter
  // hooks calls only this, after backward).
  void mark_all_ready();

  // Waits for every bucket (with the communicator's timeout), fills stats() and arms the next
  // step. Throws CommError naming the bucket and element if something was never marked.
  void finish();

  // Drops this step's marks (after completing what is in flight: the other ranks take part in it).
  void reset();

  const std::vector<ElementRange>& buckets() const { return buckets_; }
  int bucket_of(int64_t element) const;  // the bucket holding `element`
  size_t bucket_bytes() const { return bucket_bytes_; }
  const GradExchangeStats& stats() const { return stats_; }  // of the last finish()

 private:
  struct InFlight {
    std::unique_ptr<CommRequest> request;
    int64_t bytes = 0;
  };

  void start_buckets(int first, int last);  // inclusive range of buckets that became ready
  // add(b, n) for each bucket b that [begin, end) overlaps by n > 0 elements (begin in the buffer).
  template <class AddOverlap>
  void for_each_overlap(int64_t begin, int64_t end, AddOverlap&& add) const;
  cudaStream_t compute_stream() const;      // the one set, else the current stream
  void poll();
  void wait_all();
  void clear_marks();
  [[noreturn]] void throw_unmarked() const;

  Communicator& comm_;
  Tensor grads_;  // [n] viewed flat
  Tensor wire_;   // [n] in the wire dtype when it differs from grads' (device memory owned here)
  int64_t total_ = 0;
  size_t bucket_bytes_ = 0;
  std::vector<ElementRange> buckets_;
  std::vector<int64_t> remaining_;     // [buckets] elements not yet marked this step
  std::map<int64_t, int64_t> marked_;  // begin -> end of the ranges marked this step
  int64_t marked_elements_ = 0;
  int next_to_start_ = 0;  // buckets [0, next_to_start_) have been started this step
  std::vector<InFlight> in_flight_;
  size_t polled_done_ = 0;  // in_flight_[0, polled_done_) are known to be complete
  cudaStream_t compute_stream_ = nullptr;
  cudaEvent_t backward_done_ = nullptr;  // GPU only, for exposed_seconds
  GradExchangeStats stats_;
};

}  // namespace nmt
