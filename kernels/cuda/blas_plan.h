// The cuBLASLt pieces behind lt_matmul (blas.h), shared by blas.cpp, its opt-in autotuner
// (blas_autotune.cpp) and bench-kernels' gemm-algos entry: the descriptors of one product, the
// heuristic's list of algorithms for them, one run of a chosen algorithm, and the autotuner's
// choice among them. Ops call lt_matmul; only code that compares algorithms needs this header.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/blas.h"

namespace nmt::cuda {

// What cuBLASLt does after the product. bias and relu_bias read a bias vector of C's dtype;
// bias_grad (BGRADB) writes the column sums of op(B) into one.
enum class LtEpilogue { none, bias, relu, relu_bias, bias_grad };

// The epilogue lt_matmul uses for `g` with or without a bias vector (bias_grad: the bias-gradient
// variant, lt_matmul_bias_grad).
LtEpilogue lt_epilogue(const LtMatmul& g, bool has_bias, bool bias_grad);

// The smallest alignment (bytes: 1, 2, 4, 8 or 16) the heuristic may assume for A, B and C / D.
struct LtAlignments {
  int a = 16, b = 16, c = 16;
};

// The largest power of two (up to 16) dividing the address.
int lt_alignment_of(const void* p);

// The matmul descriptor and the three matrix layouts of one product (D shares C's layout),
// destroyed with the object. `bias_grad` (bias_grad epilogue only) is set as the bias pointer
// before the heuristic sees the descriptor, as blas.cpp always did; bias and relu_bias get their
// pointer at run time (lt_run).
class LtDescriptors {
 public:
  LtDescriptors(const LtMatmul& g, LtEpilogue epilogue, const void* bias_grad = nullptr);
  ~LtDescriptors();
  LtDescriptors(const LtDescriptors&) = delete;
  LtDescriptors& operator=(const LtDescriptors&) = delete;

  LtEpilogue epilogue() const { return epilogue_; }
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;

 private:
  void release() noexcept;
  LtEpilogue epilogue_;
};

// The calling thread's cuBLASLt handle on the current device (created on first use).
cublasLtHandle_t lt_handle_for_current_device();

// Fills `results` with up to `max_count` algorithms cublasLtMatmulAlgoGetHeuristic offers for the
// descriptors, best first, under a workspace of `workspace_bytes`. Returns cuBLAS's status
// unchecked: CUBLAS_STATUS_NOT_SUPPORTED (or success with no results) means no algorithm.
cublasStatus_t lt_heuristic(cublasLtHandle_t lt, const LtDescriptors& d, const LtAlignments& align,
                            uint64_t workspace_bytes, int max_count,
                            std::vector<cublasLtMatmulHeuristicResult_t>& results);

// Enqueues D = alpha op(A) op(B) (+ C when g.accumulate) with `algo` on `stream`, D written over C.
// `bias`: the bias (bias, relu_bias) or bias-gradient output (bias_grad) vector, else nullptr.
// Returns cuBLAS's status unchecked, so a caller trying candidates can skip one that fails.
cublasStatus_t lt_run(cublasLtHandle_t lt, const LtDescriptors& d, const cublasLtMatmulAlgo_t& algo,
                      const LtMatmul& g, const void* a, const void* b, void* c, const void* bias,
                      float alpha, void* workspace, size_t workspace_bytes, cudaStream_t stream);

// Whether two algorithms are the same configuration (their opaque bytes compare equal).
bool same_algo(const cublasLtMatmulAlgo_t& x, const cublasLtMatmulAlgo_t& y);

// "id 6 tile 256x128 stages 4 split-k 1 ..." from cuBLASLt's config attributes, for reports.
std::string describe_algo(const cublasLtMatmulAlgo_t& algo);

// "m=512 n=8192 k=512 A/B bf16 C f32", for messages.
std::string describe(const LtMatmul& g);

// The opt-in autotuner (blas_autotune.cpp). Times `heuristic_pick` and the heuristic's next
// candidates (up to kAutotuneCandidates in all) on `stream` a few times each, and returns the
// fastest if it beats `heuristic_pick` by more than kAutotuneMargin, else `heuristic_pick`. An
// accumulating product (beta = 1) runs on a zeroed scratch C of its own, so the caller's C still
// receives exactly one product; what is only written (D when beta = 0, a bias gradient) is the
// caller's, and the real run that follows writes it again (that spares a second logits-sized
// buffer). Inputs stay warm in L2 between runs, unlike bench-kernels' flushed timings. Must not be
// called while `stream` is capturing (stream_is_capturing). Synchronises the stream. Falls back
// to `heuristic_pick` when scratch memory cannot be had or no other candidate runs.
constexpr int kAutotuneCandidates = 16;
constexpr double kAutotuneMargin = 0.03;
cublasLtMatmulAlgo_t autotune_algo(cublasLtHandle_t lt, const LtDescriptors& d,
                                   const LtAlignments& align,
                                   const cublasLtMatmulAlgo_t& heuristic_pick, const LtMatmul& g,
                                   const void* a, const void* b, void* c, const void* bias,
                                   float alpha, cudaStream_t stream);

// True when `stream` is capturing into a CUDA graph, or when CUDA cannot tell (then it is safer
// not to time anything).
bool stream_is_capturing(cudaStream_t stream);

}  // namespace nmt::cuda
