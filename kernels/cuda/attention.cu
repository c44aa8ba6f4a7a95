// Multi-head attention on the GPU: batched GEMMs through cuBLAS plus our masked softmax. q, k, v
// stay in their [rows, heads * head_dim] layout: each (sentence, head) matrix is addressed in
// place through its leading dimension heads * head_dim, and the per-(sentence, head) base pointers
// come from a small kernel (sentence and head have different strides, which one strided batch
// cannot express). Scores go straight into the f32 probs buffer; the softmax rewrites it in place;
// the dropped-out probabilities are a scratch copy in the activation dtype for the second GEMM.
#include <algorithm>
#include <climits>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/dropout_mask.cuh"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/stream.h"
#include "kernels/op_checks.h"

namespace nmt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = 8;

// Base pointers of up to kMax matrix families: family j of (sentence b, head h) starts at
// base[j] + b * batch_stride[j] + h * head_stride[j] (bytes).
struct PointerFamilies {
  static constexpr int kMax = 12;
  const char* base[kMax];
  int64_t batch_stride[kMax];
  int64_t head_stride[kMax];
  int count = 0;
  // Returns the family's index into the filled array (family j starts at j * batch * heads).
  int add(const void* data, int64_t batch_stride_bytes, int64_t head_stride_bytes) {
    base[count] = static_cast<const char*>(data);
    batch_stride[count] = batch_stride_bytes;
    head_stride[count] = head_stride_bytes;
    return count++;
  }
};

__global__ void fill_pointers(PointerFamilies families, int64_t heads, int64_t pairs,
                              const void** pointers) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= families.count * pairs) return;
  const int j = static_cast<int>(i / pairs);
  const int64_t pair = i % pairs, b = pair / heads, h = pair % heads;
  pointers[i] = families.base[j] + b * families.batch_stride[j] + h * families.head_stride[j];
}

struct RowGeometry {
  int64_t heads, q_len, kv_len;
  bool causal;
};

// Keys [0, visible) are seen by the query of probability row `row` ((b * heads + h) * q_len + t).
__device__ __forceinline__ int64_t visible_keys(const RowGeometry& g, const int32_t* kv_lengths,
                                                int64_t row) {
  const int64_t b = row / (g.heads * g.q_len), t = row % g.q_len;
  const int64_t given = kv_lengths[b];
  const int64_t length = given < 0 ? 0 : (given > g.kv_len ? g.kv_len : given);
  return g.causal && t + 1 < length ? t + 1 : length;
}

// One warp per row: probs holds the scaled scores on entry and the softmax on exit; masked keys
// and fully masked rows get 0.
__global__ void masked_softmax_forward(float* __restrict__ probs,
                                       const int32_t* __restrict__ kv_lengths, int64_t rows,
                                       RowGeometry g) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  float* p = probs + row * g.kv_len;
  const int64_t visible = visible_keys(g, kv_lengths, row);
  float row_max = -INFINITY;
  for (int64_t s = lane; s < visible; s += 32) row_max = fmaxf(row_max, p[s]);
  row_max = warp_max(row_max);
  float sum = 0.0f;
  for (int64_t s = lane; s < visible; s += 32) sum += expf(p[s] - row_max);
  sum = warp_sum(sum);
  const float inv_sum = visible > 0 ? 1.0f / sum : 0.0f;
  for (int64_t s = lane; s < g.kv_len; s += 32)
    p[s] = s < visible ? expf(p[s] - row_max) * inv_sum : 0.0f;
}

// dropped[e] = probs[e] * keep(e) / (1 - p) in the activation dtype, element e the flat index of
// probs, eight elements per Philox call (the CPU's dropout_scales draws the same blocks).
template <typename T>
__global__ void dropped_probs(const float* __restrict__ probs, T* __restrict__ dropped, int64_t n,
                              float p, float keep_scale, RngKey key) {
  constexpr int kE = kDropoutBlockElements;
  const int64_t block = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t first = block * kE;
  if (first >= n) return;
  float scales[kE];
#pragma unroll
  for (int j = 0; j < kE; ++j) scales[j] = 1.0f;
  if (p > 0.0f) dropout_scales(key, block, p, keep_scale, scales);
  for (int j = 0; j < kE && first + j < n; ++j)
    dropped[first + j] = from_float<T>(probs[first + j] * scales[j]);
}

// One warp per row: d_scores = P * (dP - sum_s P dP), dP = d_dropped * keep / (1 - p), without
// the 1/sqrt(head_dim) (applied by the next GEMMs' alpha). Masked keys get 0.
template <typename T>
__global__ void masked_softmax_backward(const float* __restrict__ probs,
                                        const float* __restrict__ d_dropped,
                                        T* __restrict__ d_scores,
                                        const int32_t* __restrict__ kv_lengths, int64_t rows,
                                        RowGeometry g, float p, float keep_scale, RngKey key) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int64_t offset = row * g.kv_len;
  const int64_t visible = visible_keys(g, kv_lengths, row);
  auto d_prob = [&](int64_t s) {
    const float scale =
        p > 0.0f ? (dropout_keep(key, static_cast<uint64_t>(offset + s), p) ? keep_scale : 0.0f)
                 : 1.0f;
    return d_dropped[offset + s] * scale;
  };
  float dot = 0.0f;
  for (int64_t s = lane; s < visible; s += 32) dot += probs[offset + s] * d_prob(s);
  dot = warp_sum(dot);
  for (int64_t s = lane; s < g.kv_len; s += 32)
    d_scores[offset + s] =
        from_float<T>(s < visible ? probs[offset + s] * (d_prob(s) - dot) : 0.0f);
}

void batched_gemm(cublasHandle_t handle, cublasOperation_t trans_a, cublasOperation_t trans_b,
                  int64_t m, int64_t n, int64_t k, float alpha, const void* const* a,
                  cudaDataType_t a_type, int64_t lda, const void* const* b, cudaDataType_t b_type,
                  int64_t ldb, void* const* c, cudaDataType_t c_type, int64_t ldc, int64_t count) {
  const float beta = 0.0f;
  CUBLAS_CHECK(cublasGemmBatchedEx(
      handle, trans_a, trans_b, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
      &alpha, a, a_type, static_cast<int>(lda), b, b_type, static_cast<int>(ldb), &beta, c, c_type,
      static_cast<int>(ldc), static_cast<int>(count), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                  const Tensor& kv_lengths, const Tensor& probs, const AttentionShape& shape,
                  float dropout_p) {
  if (shape.batch < 0 || shape.q_len < 0 || shape.kv_len < 0 || shape.heads < 1 ||
      shape.head_dim < 1)
    throw std::invalid_argument(std::string(op) + ": invalid AttentionShape");
  if (!(dropout_p >= 0.0f && dropout_p < 1.0f))
    throw std::invalid_argument(std::string(op) + ": dropout probability " +
                                std::to_string(dropout_p) + " is outside [0, 1)");
  const int64_t width = shape.heads * shape.head_dim;
  if (width > INT_MAX || shape.batch * shape.heads > INT_MAX || shape.q_len > INT_MAX ||
      shape.kv_len > INT_MAX)
    throw std::invalid_argument(std::string(op) + ": AttentionShape too large for cuBLAS");
  check_shape(op, "q", q, {shape.batch * shape.q_len, width});
  check_shape(op, "k", k, {shape.batch * shape.kv_len, width});
  check_shape(op, "v", v, {shape.batch * shape.kv_len, width});
  check_shape(op, "kv_lengths", kv_lengths, {shape.batch});
  check_shape(op, "probs", probs, {shape.batch, shape.heads, shape.q_len, shape.kv_len});
  detail::require_dtype(op, "kv_lengths", kv_lengths, DType::i32);
  detail::require_dtype(op, "probs", probs, DType::f32);
  detail::require_same_dtype(op, "k", k, "q", q);
  detail::require_same_dtype(op, "v", v, "q", q);
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kv_lengths,
                       Tensor& out, Tensor& probs, const AttentionShape& shape, float dropout_p,
                       const RngKey& key) {
  constexpr const char* op = "attention_forward";
  check_inputs(op, q, k, v, kv_lengths, probs, shape, dropout_p);
  check_shape(op, "out", out, {shape.batch * shape.q_len, shape.heads * shape.head_dim});
  detail::require_same_dtype(op, "out", out, "q", q);
  detail::require_on_gpu(op, {{"q", &q},
                              {"k", &k},
                              {"v", &v},
                              {"kv_lengths", &kv_lengths},
                              {"out", &out},
                              {"probs", &probs}});
  const int64_t B = shape.batch, H = shape.heads, T = shape.q_len, S = shape.kv_len;
  const int64_t dh = shape.head_dim, width = H * dh, pairs = B * H;
  if (B == 0 || T == 0) return;
  cudaStream_t stream = current_stream();
  if (S == 0) {  // every key masked: output 0 (probs has no elements)
    CUDA_CHECK(cudaMemsetAsync(out.data, 0, out.bytes(), stream));
    return;
  }
  const size_t es = dtype_size(q.dtype);
  const int64_t prob_count = pairs * T * S;
  ScratchLayout layout;
  const size_t dropped_offset = layout.add(static_cast<size_t>(prob_count) * es);
  const size_t pointers_offset = layout.add(static_cast<size_t>(6 * pairs) * sizeof(void*));
  void* base = stream_resources(stream).scratch(layout.total());
  void* dropped = at_offset<void>(base, dropped_offset);
  const void** pointers = at_offset<const void*>(base, pointers_offset);

  PointerFamilies families;
  const int k_ptrs = families.add(k.data, S * width * es, dh * es);
  const int q_ptrs = families.add(q.data, T * width * es, dh * es);
  const int probs_ptrs = families.add(probs.data, H * T * S * 4, T * S * 4);
  const int v_ptrs = families.add(v.data, S * width * es, dh * es);
  const int dropped_ptrs = families.add(dropped, H * T * S * es, T * S * es);
  const int out_ptrs = families.add(out.data, T * width * es, dh * es);
  fill_pointers<<<blocks_for(families.count * pairs, kThreads), kThreads, 0, stream>>>(
      families, H, pairs, pointers);
  CUDA_CHECK_LAUNCH();
  auto family = [&](int j) { return pointers + j * pairs; };
  auto writable = [&](int j) { return const_cast<void* const*>(family(j)); };

  cublasHandle_t handle = blas_handle(stream);
  const cudaDataType_t ab = cuda_data_type(q.dtype);
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  // scoresᵀ (S x T) = op_T(K as dh x S) · (Q as dh x T), scaled: probs row t holds query t.
  batched_gemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, S, T, dh, scale, family(k_ptrs), ab, width,
               family(q_ptrs), ab, width, writable(probs_ptrs), CUDA_R_32F, S, pairs);
  const int64_t rows = pairs * T;
  const RowGeometry geometry{H, T, S, shape.causal};
  masked_softmax_forward<<<blocks_for(rows, kWarpsPerBlock), kWarpsPerBlock * 32, 0, stream>>>(
      static_cast<float*>(probs.data), static_cast<const int32_t*>(kv_lengths.data), rows,
      geometry);
  CUDA_CHECK_LAUNCH();
  const float keep_scale = dropout_p > 0.0f ? 1.0f / (1.0f - dropout_p) : 1.0f;
  dispatch_float_dtype(q.dtype, op, "q", [&](auto tag) {
    using E = typename decltype(tag)::type;
    dropped_probs<E>
        <<<blocks_for((prob_count + kDropoutBlockElements - 1) / kDropoutBlockElements, kThreads),
           kThreads, 0, stream>>>(static_cast<const float*>(probs.data), static_cast<E*>(dropped),
                                  prob_count, dropout_p, keep_scale, key);
    CUDA_CHECK_LAUNCH();
  });
  // outᵀ (dh x T) = (V as dh x S) · (dropped P as S x T).
  batched_gemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, dh, T, S, 1.0f, family(v_ptrs), ab, width,
               family(dropped_ptrs), ab, S, writable(out_ptrs), ab, width, pairs);
}

void attention_backward(const Tensor& d_out, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& probs, const Tensor& kv_lengths, Tensor& dq, Tensor& dk,
                        Tensor& dv, const AttentionShape& shape, float dropout_p,
                        const RngKey& key) {
  constexpr const char* op = "attention_backward";
  check_inputs(op, q, k, v, kv_lengths, probs, shape, dropout_p);
  check_shape(op, "d_out", d_out, {shape.batch * shape.q_len, shape.heads * shape.head_dim});
  check_shape(op, "dq", dq, {shape.batch * shape.q_len, shape.heads * shape.head_dim});
  check_shape(op, "dk", dk, {shape.batch * shape.kv_len, shape.heads * shape.head_dim});
  check_shape(op, "dv", dv, {shape.batch * shape.kv_len, shape.heads * shape.head_dim});
  detail::require_same_dtype(op, "d_out", d_out, "q", q);
  detail::require_same_dtype(op, "dq", dq, "q", q);
  detail::require_same_dtype(op, "dk", dk, "q", q);
  detail::require_same_dtype(op, "dv", dv, "q", q);
  detail::require_on_gpu(op, {{"d_out", &d_out},
                              {"q", &q},
                              {"k", &k},
                              {"v", &v},
                              {"probs", &probs},
                              {"kv_lengths", &kv_lengths},
                              {"dq", &dq},
                              {"dk", &dk},
                              {"dv", &dv}});
  const int64_t B = shape.batch, H = shape.heads, T = shape.q_len, S = shape.kv_len;
  const int64_t dh = shape.head_dim, width = H * dh, pairs = B * H;
  if (B == 0) return;
  cudaStream_t stream = current_stream();
  if (T == 0 || S == 0) {  // no query or no key: every gradient is 0
    if (dk.numel()) CUDA_CHECK(cudaMemsetAsync(dk.data, 0, dk.bytes(), stream));
    if (dv.numel()) CUDA_CHECK(cudaMemsetAsync(dv.data, 0, dv.bytes(), stream));
    if (dq.numel()) CUDA_CHECK(cudaMemsetAsync(dq.data, 0, dq.bytes(), stream));
    return;
  }
  const size_t es = dtype_size(q.dtype);
  const int64_t prob_count = pairs * T * S;
  ScratchLayout layout;
  const size_t dropped_offset = layout.add(static_cast<size_t>(prob_count) * es);
  const size_t d_dropped_offset = layout.add(static_cast<size_t>(prob_count) * sizeof(float));
  const size_t d_scores_offset = layout.add(static_cast<size_t>(prob_count) * es);
  const size_t pointers_offset = layout.add(static_cast<size_t>(12 * pairs) * sizeof(void*));
  void* base = stream_resources(stream).scratch(layout.total());
  void* dropped = at_offset<void>(base, dropped_offset);
  float* d_dropped = at_offset<float>(base, d_dropped_offset);
  void* d_scores = at_offset<void>(base, d_scores_offset);
  const void** pointers = at_offset<const void*>(base, pointers_offset);

  const int64_t q_batch = T * width * es, kv_batch = S * width * es, head = dh * es;
  PointerFamilies families;
  const int d_out_ptrs = families.add(d_out.data, q_batch, head);
  const int dropped_ptrs = families.add(dropped, H * T * S * es, T * S * es);
  const int dv_ptrs = families.add(dv.data, kv_batch, head);
  const int v_ptrs = families.add(v.data, kv_batch, head);
  const int d_dropped_ptrs = families.add(d_dropped, H * T * S * 4, T * S * 4);
  const int k_ptrs = families.add(k.data, kv_batch, head);
  const int d_scores_ptrs = families.add(d_scores, H * T * S * es, T * S * es);
  const int dq_ptrs = families.add(dq.data, q_batch, head);
  const int q_ptrs = families.add(q.data, q_batch, head);
  const int dk_ptrs = families.add(dk.data, kv_batch, head);
  fill_pointers<<<blocks_for(families.count * pairs, kThreads), kThreads, 0, stream>>>(
      families, H, pairs, pointers);
  CUDA_CHECK_LAUNCH();
  auto family = [&](int j) { return pointers + j * pairs; };
  auto writable = [&](int j) { return const_cast<void* const*>(family(j)); };

  const float keep_scale = dropout_p > 0.0f ? 1.0f / (1.0f - dropout_p) : 1.0f;
  const int64_t rows = pairs * T;
  const RowGeometry geometry{H, T, S, shape.causal};
  cublasHandle_t handle = blas_handle(stream);
  const cudaDataType_t ab = cuda_data_type(q.dtype);
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  dispatch_float_dtype(q.dtype, op, "q", [&](auto tag) {
    using E = typename decltype(tag)::type;
    dropped_probs<E>
        <<<blocks_for((prob_count + kDropoutBlockElements - 1) / kDropoutBlockElements, kThreads),
           kThreads, 0, stream>>>(static_cast<const float*>(probs.data), static_cast<E*>(dropped),
                                  prob_count, dropout_p, keep_scale, key);
    CUDA_CHECK_LAUNCH();
    // dVᵀ (dh x S) = (dOut as dh x T) · op_T(dropped P as S x T).
    batched_gemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, dh, S, T, 1.0f, family(d_out_ptrs), ab, width,
                 family(dropped_ptrs), ab, S, writable(dv_ptrs), ab, width, pairs);
    // d(dropped P)ᵀ (S x T) = op_T(V as dh x S) · (dOut as dh x T), in f32.
    batched_gemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, S, T, dh, 1.0f, family(v_ptrs), ab, width,
                 family(d_out_ptrs), ab, width, writable(d_dropped_ptrs), CUDA_R_32F, S, pairs);
    masked_softmax_backward<E>
        <<<blocks_for(rows, kWarpsPerBlock), kWarpsPerBlock * 32, 0, stream>>>(
            static_cast<const float*>(probs.data), d_dropped, static_cast<E*>(d_scores),
            static_cast<const int32_t*>(kv_lengths.data), rows, geometry, dropout_p, keep_scale,
            key);
    CUDA_CHECK_LAUNCH();
  });
  // dQᵀ (dh x T) = scale * (K as dh x S) · (dS as S x T).
  batched_gemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, dh, T, S, scale, family(k_ptrs), ab, width,
               family(d_scores_ptrs), ab, S, writable(dq_ptrs), ab, width, pairs);
  // dKᵀ (dh x S) = scale * (Q as dh x T) · op_T(dS as S x T).
  batched_gemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, dh, S, T, scale, family(q_ptrs), ab, width,
               family(d_scores_ptrs), ab, S, writable(dk_ptrs), ab, width, pairs);
}

}  // namespace nmt::cuda
