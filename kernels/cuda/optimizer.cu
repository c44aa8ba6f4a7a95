// Gradient sum of squares and the TensorFlow-style Adam / LazyAdam updates on the GPU, each one
// launch over flat fp32 buffers. The per-element arithmetic follows the CPU reference term by
// term (kernels/cpu/optimizer.cpp); only fused multiply-adds can differ in the last bit.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/optimizer.h"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/stream.h"
#include "kernels/op_checks.h"

namespace nmt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kSumThreads = 1024;
constexpr int kWarpsPerBlock = 8;

// --- sum of squares: fp32 per block in a fixed grid, then the blocks' sums in double -----------

template <typename T, int VEC>
__global__ void sum_of_squares_partials(const T* __restrict__ x, int64_t n,
                                        float* __restrict__ partials) {
  __shared__ float shared[32];
  using P = Pack<T, VEC>;
  const int64_t packs = n / VEC;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  float sum = 0.0f;
  for (int64_t i = first; i < packs; i += stride) {
    const P pack = reinterpret_cast<const P*>(x)[i];
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float value = to_float(pack.v[j]);
      sum += value * value;
    }
  }
  if (first < n - packs * VEC) {
    const float value = to_float(x[packs * VEC + first]);
    sum += value * value;
  }
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// clip: nullptr, or where the step's GradClip record goes (grad_clip_of of the total).
__global__ void __launch_bounds__(kSumThreads)
    sum_partials_in_double(const float* __restrict__ partials, int count,
                           double* __restrict__ total, GradClip* __restrict__ clip, double divisor,
                           float max_norm) {
  __shared__ double shared[kSumThreads];
  double sum = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  shared[threadIdx.x] = sum;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  *total = shared[0];
  if (clip) *clip = grad_clip_of(shared[0], divisor, max_norm);
}

// --- Adam --------------------------------------------------------------------------------------

struct AdamConstants {
  float lr_t;          // lr * sqrt(1 - b2^step) / (1 - b1^step)
  float decay_factor;  // 1 - lr * weight_decay
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
  float grad_scale;
  const GradClip* clip;  // nullptr, or the record whose scale replaces grad_scale (and may skip)
};

AdamConstants adam_constants(const AdamHyper& h, const GradScale& scale) {
  const double t = static_cast<double>(h.step);
  const double correction = std::sqrt(1.0 - std::pow(static_cast<double>(h.beta2), t)) /
                            (1.0 - std::pow(static_cast<double>(h.beta1), t));
  return AdamConstants{static_cast<float>(h.lr * correction),
                       1.0f - h.lr * h.weight_decay,
                       h.beta1,
                       h.beta2,
                       1.0f - h.beta1,
                       1.0f - h.beta2,
                       h.eps,
                       scale.value,
                       scale.clip ? static_cast<const GradClip*>(scale.clip->data) : nullptr};
}

// The record's factor in a.grad_scale; false when the record says the step is skipped.
__device__ __forceinline__ bool read_clip(AdamConstants& a) {
  if (a.clip == nullptr) return true;
  const GradClip clip = *a.clip;
  a.grad_scale = clip.scale;
  return clip.skip == 0;
}

__device__ __forceinline__ void adam_element(float& param, float raw_grad, float& m, float& v,
                                             const AdamConstants& a) {
  const float grad = raw_grad * a.grad_scale;
  m = a.beta1 * m + a.one_minus_beta1 * grad;
  v = a.beta2 * v + a.one_minus_beta2 * grad * grad;
  param = param * a.decay_factor - a.lr_t * m / (sqrtf(v) + a.eps);
}

// compute: nullptr, or the working copy [n] written with the updated parameters (mixed precision:
// one pass instead of a separate conversion after the update).
template <int VEC, typename C>
__global__ void adam_kernel(float* __restrict__ param, const float* __restrict__ grad,
                            float* __restrict__ m, float* __restrict__ v, int64_t n,
                            AdamConstants a, C* __restrict__ compute) {
  using P = Pack<float, VEC>;
  if (!read_clip(a)) return;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t packs = n / VEC;
  if (i < packs) {
    P p = reinterpret_cast<P*>(param)[i];
    const P g = reinterpret_cast<const P*>(grad)[i];
    P pm = reinterpret_cast<P*>(m)[i];
    P pv = reinterpret_cast<P*>(v)[i];
#pragma unroll
    for (int j = 0; j < VEC; ++j) adam_element(p.v[j], g.v[j], pm.v[j], pv.v[j], a);
    reinterpret_cast<P*>(param)[i] = p;
    reinterpret_cast<P*>(m)[i] = pm;
    reinterpret_cast<P*>(v)[i] = pv;
    if (compute)
#pragma unroll
      for (int j = 0; j < VEC; ++j) compute[i * VEC + j] = from_float<C>(p.v[j]);
  }
  const int64_t tail = packs * VEC + i;
  if (i < n - packs * VEC) {
    adam_element(param[tail], grad[tail], m[tail], v[tail], a);
    if (compute) compute[tail] = from_float<C>(param[tail]);
  }
}

// One warp per row: a row whose gradient is all zeros keeps its parameters and moments.
template <int VEC, typename C>
__global__ void lazy_adam_kernel(float* __restrict__ param, const float* __restrict__ grad,
                                 float* __restrict__ m, float* __restrict__ v, int64_t rows,
                                 int64_t cols, AdamConstants a, C* __restrict__ compute) {
  using P = Pack<float, VEC>;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows || !read_clip(a)) return;
  const int64_t base = row * cols;
  bool touched = false;
  for (int64_t c = lane * VEC; c < cols; c += 32 * VEC) {
    const P g = *reinterpret_cast<const P*>(grad + base + c);
#pragma unroll
    for (int j = 0; j < VEC; ++j) touched |= !(g.v[j] == 0.0f);
  }
  if (!__any_sync(0xffffffffu, touched)) return;
  for (int64_t c = lane * VEC; c < cols; c += 32 * VEC) {
    P p = *reinterpret_cast<P*>(param + base + c);
    const P g = *reinterpret_cast<const P*>(grad + base + c);
    P pm = *reinterpret_cast<P*>(m + base + c);
    P pv = *reinterpret_cast<P*>(v + base + c);
#pragma unroll
    for (int j = 0; j < VEC; ++j) adam_element(p.v[j], g.v[j], pm.v[j], pv.v[j], a);
    *reinterpret_cast<P*>(param + base + c) = p;
    *reinterpret_cast<P*>(m + base + c) = pm;
    *reinterpret_cast<P*>(v + base + c) = pv;
    if (compute)
#pragma unroll
      for (int j = 0; j < VEC; ++j) compute[base + c + j] = from_float<C>(p.v[j]);
  }
}

// Calls f(TypeTag<C>{}, pointer) with the working copy's element type, or bf16 with nullptr when
// there is none (the kernels then skip the store).
template <typename F>
void with_compute(const char* op, const Tensor* compute, const Tensor& param, F&& f) {
  if (compute == nullptr || compute->empty()) {
    f(TypeTag<__nv_bfloat16>{}, static_cast<__nv_bfloat16*>(nullptr));
    return;
  }
  detail::require_same_shape(op, "compute", *compute, "param", param);
  detail::require_on_gpu(op, {{"compute", compute}});
  dispatch_float_dtype(compute->dtype, op, "compute", [&](auto tag) {
    using C = typename decltype(tag)::type;
    f(tag, static_cast<C*>(compute->data));
  });
}

void check_adam(const char* op, const Tensor& param, const Tensor& grad, const Tensor& m,
                const Tensor& v) {
  detail::require_same_shape(op, "grad", grad, "param", param);
  detail::require_same_shape(op, "m", m, "param", param);
  detail::require_same_shape(op, "v", v, "param", param);
  detail::require_dtype(op, "param", param, DType::f32);
  detail::require_dtype(op, "grad", grad, DType::f32);
  detail::require_dtype(op, "m", m, DType::f32);
  detail::require_dtype(op, "v", v, DType::f32);
  detail::require_on_gpu(op, {{"param", &param}, {"grad", &grad}, {"m", &m}, {"v", &v}});
}

// A record the kernels read or write as a GradClip: on the GPU, aligned for its double.
void check_clip_record(const char* op, const Tensor& clip) {
  detail::require_on_gpu(op, {{"clip", &clip}});
  if (!is_aligned16(clip.data))
    throw std::invalid_argument(std::string(op) + ": clip must be 16-byte aligned");
}

void check_clip_record(const char* op, const GradScale& scale) {
  if (scale.clip) check_clip_record(op, *scale.clip);
}

bool all_aligned(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& d) {
  return is_aligned16(a.data) && is_aligned16(b.data) && is_aligned16(c.data) &&
         is_aligned16(d.data);
}

int sum_blocks(int64_t n) {
  return static_cast<int>(
      std::min<int64_t>(int64_t{4} * multiprocessor_count(), blocks_for(n, kThreads * 8)));
}

// Enqueues the sum of squares of x on the current stream (the blocks' partials and the total in
// the stream's scratch; no elements: no partials, and the last kernel sums none) and, when `clip`
// is given, the step's record there. Returns where the total lies.
double* enqueue_sum_of_squares(const char* op, const Tensor& x, GradClip* clip = nullptr,
                               double divisor = 0.0, float max_norm = 0.0f) {
  cudaStream_t stream = current_stream();
  const int64_t n = x.numel();
  const int blocks = n == 0 ? 0 : sum_blocks(n);
  ScratchLayout layout;
  const size_t partials_offset =
      layout.add(static_cast<size_t>(std::max(blocks, 1)) * sizeof(float));
  const size_t total_offset = layout.add(sizeof(double));
  void* base = stream_resources(stream).scratch(layout.total());
  float* partials = at_offset<float>(base, partials_offset);
  double* total = at_offset<double>(base, total_offset);
  if (blocks > 0)
    dispatch_float_dtype(x.dtype, op, "x", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* data = static_cast<const T*>(x.data);
      if (is_aligned16(x.data))
        sum_of_squares_partials<T, kPackWidth<T>>
            <<<blocks, kThreads, 0, stream>>>(data, n, partials);
      else
        sum_of_squares_partials<T, 1><<<blocks, kThreads, 0, stream>>>(data, n, partials);
      CUDA_CHECK_LAUNCH();
    });
  sum_partials_in_double<<<1, kSumThreads, 0, stream>>>(partials, blocks, total, clip, divisor,
                                                        max_norm);
  CUDA_CHECK_LAUNCH();
  return total;
}

}  // namespace

double sum_of_squares(const Tensor& x) {
  constexpr const char* op = "sum_of_squares";
  detail::require_on_gpu(op, {{"x", &x}});
  if (x.numel() == 0) return 0.0;
  cudaStream_t stream = current_stream();
  const double* total = enqueue_sum_of_squares(op, x);
  auto* host_total = static_cast<double*>(stream_resources(stream).host_result(sizeof(double)));
  CUDA_CHECK(cudaMemcpyAsync(host_total, total, sizeof(double), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return *host_total;
}

void grad_clip_into(const Tensor& x, double divisor, float max_norm, Tensor& clip) {
  constexpr const char* op = "grad_clip_into";
  detail::require_on_gpu(op, {{"x", &x}});
  check_clip_record(op, clip);
  enqueue_sum_of_squares(op, x, static_cast<GradClip*>(clip.data), divisor, max_norm);
}

GradClip read_grad_clip(const Tensor& clip) {
  detail::require_on_gpu("read_grad_clip", {{"clip", &clip}});
  cudaStream_t stream = current_stream();
  auto* host = static_cast<GradClip*>(stream_resources(stream).host_result(sizeof(GradClip)));
  CUDA_CHECK(cudaMemcpyAsync(host, clip.data, sizeof(GradClip), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return *host;
}

void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h,
                 GradScale grad_scale, Tensor* compute) {
  constexpr const char* op = "adam_update";
  check_adam(op, param, grad, m, v);
  check_clip_record(op, grad_scale);
  const int64_t n = param.numel();
  if (n == 0) return;
  cudaStream_t stream = current_stream();
  const AdamConstants constants = adam_constants(h, grad_scale);
  float* p = static_cast<float*>(param.data);
  const float* g = static_cast<const float*>(grad.data);
  float* pm = static_cast<float*>(m.data);
  float* pv = static_cast<float*>(v.data);
  with_compute(op, compute, param, [&](auto tag, auto* working) {
    using C = typename decltype(tag)::type;
    if (all_aligned(param, grad, m, v))
      adam_kernel<4, C>
          <<<blocks_for(std::max<int64_t>(n / 4, n % 4), kThreads), kThreads, 0, stream>>>(
              p, g, pm, pv, n, constants, working);
    else
      adam_kernel<1, C>
          <<<blocks_for(n, kThreads), kThreads, 0, stream>>>(p, g, pm, pv, n, constants, working);
    CUDA_CHECK_LAUNCH();
  });
}

void lazy_adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h,
                      GradScale grad_scale, Tensor* compute) {
  constexpr const char* op = "lazy_adam_update";
  detail::require_rank(op, "param", param, 2);
  check_adam(op, param, grad, m, v);
  check_clip_record(op, grad_scale);
  const int64_t rows = param.dim(0), cols = param.dim(1);
  if (rows == 0 || cols == 0) return;
  cudaStream_t stream = current_stream();
  const AdamConstants constants = adam_constants(h, grad_scale);
  float* p = static_cast<float*>(param.data);
  const float* g = static_cast<const float*>(grad.data);
  float* pm = static_cast<float*>(m.data);
  float* pv = static_cast<float*>(v.data);
  const unsigned blocks = blocks_for(rows, kWarpsPerBlock);
  with_compute(op, compute, param, [&](auto tag, auto* working) {
    using C = typename decltype(tag)::type;
    if (cols % 4 == 0 && all_aligned(param, grad, m, v))
      lazy_adam_kernel<4, C><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(p, g, pm, pv, rows, cols,
                                                                         constants, working);
    else
      lazy_adam_kernel<1, C><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(p, g, pm, pv, rows, cols,
                                                                         constants, working);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace nmt::cuda
