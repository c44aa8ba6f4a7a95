// The opt-in cuBLASLt autotuner (blas.h: set_gemm_autotune; blas_plan.h: autotune_algo): times
// the heuristic's candidates for one product once and keeps the fastest by a margin.
#include <algorithm>
#include <atomic>
#include <limits>
#include <vector>

#include "kernels/cuda/blas.h"
#include "kernels/cuda/blas_plan.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/scratch.h"
#include "kernels/env_switch.h"

namespace nmt::cuda {
namespace {

// One untimed round (first launches, cuBLASLt's lazy kernel loading) and then kTimedRounds rounds
// that run every candidate once each, interleaved so that a clock or power change over the
// rounds weighs on all candidates alike; each candidate's median round counts.
constexpr int kTimedRounds = 5;

EnvSwitch autotune_switch("NMT_GEMM_AUTOTUNE", /*default_on=*/false);
std::atomic<long long> plans_timed{0}, plans_changed{0};

// Stream-ordered device memory (cudaMallocAsync: no device-wide synchronisation, which could
// stall behind other streams' collectives), freed on the stream at scope exit; empty when the
// allocation failed (the error is cleared, so the caller can go on without it).
class ScratchBuffer {
 public:
  ScratchBuffer(size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes > 0 && cudaMallocAsync(&data_, bytes, stream) != cudaSuccess) {
      (void)cudaGetLastError();
      data_ = nullptr;
    }
  }
  ~ScratchBuffer() {
    if (data_) cudaFreeAsync(data_, stream_);
  }
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  void* data() const { return data_; }

 private:
  cudaStream_t stream_;
  void* data_ = nullptr;
};

class Events {
 public:
  explicit Events(size_t count) : events_(count, nullptr) {
    for (cudaEvent_t& e : events_) CUDA_CHECK(cudaEventCreate(&e));
  }
  ~Events() {
    for (cudaEvent_t e : events_)
      if (e) cudaEventDestroy(e);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  cudaEvent_t operator[](size_t i) const { return events_[i]; }

 private:
  std::vector<cudaEvent_t> events_;
};

}  // namespace

void set_gemm_autotune(bool on) {
  autotune_switch.set(on);
}

bool gemm_autotune() {
  return autotune_switch.get();
}

GemmAutotuneCounts gemm_autotune_counts() {
  return GemmAutotuneCounts{plans_timed.load(), plans_changed.load()};
}

bool stream_is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();  // e.g. the legacy stream while another stream captures globally
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

cublasLtMatmulAlgo_t autotune_algo(cublasLtHandle_t lt, const LtDescriptors& d,
                                   const LtAlignments& align,
                                   const cublasLtMatmulAlgo_t& heuristic_pick, const LtMatmul& g,
                                   const void* a, const void* b, void* c, const void* bias,
                                   float alpha, cudaStream_t stream) {
  std::vector<cublasLtMatmulHeuristicResult_t> offered;
  lt_heuristic(lt, d, align, kBlasWorkspaceBytes, kAutotuneCandidates, offered);
  std::vector<cublasLtMatmulAlgo_t> candidates{heuristic_pick};
  for (const auto& result : offered) {
    if (candidates.size() >= static_cast<size_t>(kAutotuneCandidates)) break;
    if (result.state != CUBLAS_STATUS_SUCCESS) continue;
    const bool listed = std::any_of(candidates.begin(), candidates.end(), [&](const auto& known) {
      return same_algo(known, result.algo);
    });
    if (!listed) candidates.push_back(result.algo);
  }
  if (candidates.size() < 2) return heuristic_pick;

  // Outputs: beta = 1 adds to C, so an accumulating product runs on a zeroed C of its own. D with
  // beta = 0 and a bias gradient are only written, and the real run that follows writes them again.
  const size_t c_bytes =
      static_cast<size_t>(g.ldc) * static_cast<size_t>(g.n) * dtype_size(g.c_type);
  ScratchBuffer scratch_c(g.accumulate ? c_bytes : 0, stream);
  if (g.accumulate && scratch_c.data() == nullptr) return heuristic_pick;
  void* out = g.accumulate ? scratch_c.data() : c;
  if (g.accumulate) CUDA_CHECK(cudaMemsetAsync(out, 0, c_bytes, stream));

  void* workspace = stream_resources(stream).blas_workspace();
  std::vector<bool> usable(candidates.size(), true);
  for (size_t i = 0; i < candidates.size(); ++i)
    usable[i] = lt_run(lt, d, candidates[i], g, a, b, out, bias, alpha, workspace,
                       kBlasWorkspaceBytes, stream) == CUBLAS_STATUS_SUCCESS;
  // Without the heuristic's pick (the real run will report its error) or another candidate to
  // compare with, there is nothing to time.
  if (!usable[0] || std::count(usable.begin(), usable.end(), true) < 2) return heuristic_pick;

  // marks[j] and marks[j + 1] enclose the j-th run.
  const size_t runs_per_round = candidates.size();
  Events marks(kTimedRounds * runs_per_round + 1);
  CUDA_CHECK(cudaEventRecord(marks[0], stream));
  for (int round = 0; round < kTimedRounds; ++round)
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (usable[i] && lt_run(lt, d, candidates[i], g, a, b, out, bias, alpha, workspace,
                              kBlasWorkspaceBytes, stream) != CUBLAS_STATUS_SUCCESS)
        usable[i] = false;
      CUDA_CHECK(cudaEventRecord(marks[round * runs_per_round + i + 1], stream));
    }
  CUDA_CHECK(cudaEventSynchronize(marks[kTimedRounds * runs_per_round]));

  std::vector<double> median_ms(candidates.size(), std::numeric_limits<double>::infinity());
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!usable[i]) continue;
    std::vector<double> times;
    for (int round = 0; round < kTimedRounds; ++round) {
      const size_t j = round * runs_per_round + i;
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, marks[j], marks[j + 1]));
      times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    median_ms[i] = times[times.size() / 2];
  }
  const size_t fastest =
      static_cast<size_t>(std::min_element(median_ms.begin(), median_ms.end()) - median_ms.begin());
  ++plans_timed;
  if (fastest == 0 || !(median_ms[fastest] < median_ms[0] * (1.0 - kAutotuneMargin)))
    return heuristic_pick;
  ++plans_changed;
  return candidates[fastest];
}

}  // namespace nmt::cuda
