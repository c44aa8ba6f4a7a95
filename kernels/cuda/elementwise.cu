// Elementwise ops on the GPU: ReLU, residual and in-place adds, scaling, dropout, the fused
// dropout + residual add and ReLU + dropout backward, fill and copy. Each thread handles one
// 16-byte pack when every pointer is aligned (one element otherwise); dropout draws one Philox
// block per four elements, exactly as the CPU does.
#include <stdexcept>
#include <string>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/dropout_mask.cuh"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/stream.h"
#include "kernels/op_checks.h"

namespace nmt::cuda {
namespace {

constexpr int kThreads = 256;

struct ReluForwardOp {
  __device__ float operator()(float x, float) const { return x > 0.0f ? x : 0.0f; }
};
struct ReluBackwardOp {  // (dy, y)
  __device__ float operator()(float dy, float y) const { return y > 0.0f ? dy : 0.0f; }
};
struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct ScaleOp {
  float s;
  __device__ float operator()(float a, float) const { return a * s; }
};
// (dy, y): the backward of y = dropout(relu(z)) (elementwise.h). One product and one rounding, as
// dropout_backward's; relu_backward after it only copied or zeroed.
struct ReluDropoutBackwardOp {
  float keep_scale;
  __device__ float operator()(float dy, float y) const { return y > 0.0f ? dy * keep_scale : 0.0f; }
};

// y[i] = op(a[i], b[i]) for n elements; VEC elements per thread, the last n % VEC elements by the
// first threads. y may alias a or b: each element is read and written by one thread.
template <typename T, int VEC, typename Op>
__global__ void map_kernel(const T* a, const T* b, T* y, int64_t n, Op op) {
  using P = Pack<T, VEC>;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t packs = n / VEC;
  if (i < packs) {
    const P pa = reinterpret_cast<const P*>(a)[i];
    const P pb = reinterpret_cast<const P*>(b)[i];
    P out;
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      out.v[j] = from_float<T>(op(to_float(pa.v[j]), to_float(pb.v[j])));
    reinterpret_cast<P*>(y)[i] = out;
  }
  const int64_t tail = packs * VEC + i;
  if (i < n - packs * VEC) y[tail] = from_float<T>(op(to_float(a[tail]), to_float(b[tail])));
}

// dst[i] = src[i] converted through fp32 (exact for every pair of our dtypes but f32 -> 16-bit,
// which rounds to nearest even).
template <typename S, typename D>
__global__ void convert_kernel(const S* src, D* dst, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = from_float<D>(to_float(src[i]));
}

template <typename Op>
void launch_map(const char* op_name, const Tensor& a, const Tensor& b, Tensor& y, Op op) {
  const int64_t n = y.numel();
  if (n == 0) return;
  cudaStream_t stream = current_stream();
  const bool aligned = is_aligned16(a.data) && is_aligned16(b.data) && is_aligned16(y.data);
  dispatch_float_dtype(y.dtype, op_name, "y", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pa = static_cast<const T*>(a.data);
    const T* pb = static_cast<const T*>(b.data);
    T* py = static_cast<T*>(y.data);
    if (aligned) {
      constexpr int vec = kPackWidth<T>;
      const int64_t threads_needed = std::max<int64_t>(n / vec, n % vec);
      map_kernel<T, vec, Op>
          <<<blocks_for(threads_needed, kThreads), kThreads, 0, stream>>>(pa, pb, py, n, op);
    } else {
      map_kernel<T, 1, Op><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(pa, pb, py, n, op);
    }
    CUDA_CHECK_LAUNCH();
  });
}

// One thread per block of eight elements (one Philox call). y may alias x. With POSITIVE_BITS the
// thread also stores byte `block` of positive_bytes, bit j set where its element j of y > 0 (the
// layout of kernels/philox.h's saved masks); the last block's thread zeroes the bytes after its own
// up to the end of the mask's last word (bytes_end).
template <typename T, bool PACKED, bool POSITIVE_BITS>
__global__ void dropout_kernel(const T* x, T* y, int64_t n, float p, float keep_scale, RngKey key,
                               uint8_t* positive_bytes, int64_t bytes_end) {
  constexpr int kE = kDropoutBlockElements;
  const int64_t block = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t first = block * kE;
  if (first >= n) return;
  float scales[kE];
  uint32_t positive = 0;
  if (PACKED && first + kE <= n) {
    using P = Pack<T, kE>;
    // Loaded before the draw, so the load's latency hides behind the Philox rounds (after them,
    // a third of the kernel's stall samples waited on it).
    const P in = reinterpret_cast<const P*>(x)[block];
    dropout_scales(key, block, p, keep_scale, scales);
    P out;
#pragma unroll
    for (int j = 0; j < kE; ++j) {
      out.v[j] = from_float<T>(to_float(in.v[j]) * scales[j]);
      if constexpr (POSITIVE_BITS) positive |= to_float(out.v[j]) > 0.0f ? 1u << j : 0u;
    }
    reinterpret_cast<P*>(y)[block] = out;
  } else {
    dropout_scales(key, block, p, keep_scale, scales);
    for (int j = 0; j < kE && first + j < n; ++j) {
      const T out = from_float<T>(to_float(x[first + j]) * scales[j]);
      y[first + j] = out;
      if constexpr (POSITIVE_BITS) positive |= to_float(out) > 0.0f ? 1u << j : 0u;
    }
  }
  if constexpr (POSITIVE_BITS) {
    positive_bytes[block] = static_cast<uint8_t>(positive);
    if (first + kE >= n)
      for (int64_t b = block + 1; b < bytes_end; ++b) positive_bytes[b] = 0;
  }
}

// y = a + dropout(b), one thread per block of eight elements (one Philox call), the mask and the
// product of dropout_kernel. The dropped-out b is rounded to T before the add, as dropout_forward
// stored it, so the result equals the two separate ops bit for bit; __fmul_rn / __fadd_rn keep
// nvcc from contracting the f32 product and add into one FMA (which rounds once). y may alias a
// or b.
template <typename T, bool PACKED>
__global__ void dropout_residual_add_kernel(const T* a, const T* b, T* y, int64_t n, float p,
                                            float keep_scale, RngKey key) {
  constexpr int kE = kDropoutBlockElements;
  const int64_t block = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t first = block * kE;
  if (first >= n) return;
  float scales[kE];
  const auto sum = [&](T av, T bv, float scale) {
    const T dropped = from_float<T>(__fmul_rn(to_float(bv), scale));
    return from_float<T>(__fadd_rn(to_float(av), to_float(dropped)));
  };
  if (PACKED && first + kE <= n) {
    using P = Pack<T, kE>;
    const P pa = reinterpret_cast<const P*>(a)[block];  // loaded before the draw (dropout_kernel)
    const P pb = reinterpret_cast<const P*>(b)[block];
    dropout_scales(key, block, p, keep_scale, scales);
    P out;
#pragma unroll
    for (int j = 0; j < kE; ++j) out.v[j] = sum(pa.v[j], pb.v[j], scales[j]);
    reinterpret_cast<P*>(y)[block] = out;
  } else {
    dropout_scales(key, block, p, keep_scale, scales);
    for (int j = 0; j < kE && first + j < n; ++j)
      y[first + j] = sum(a[first + j], b[first + j], scales[j]);
  }
}

void check_same(const char* op, const char* name, const Tensor& t, const char* like_name,
                const Tensor& like) {
  detail::require_same_shape(op, name, t, like_name, like);
  detail::require_same_dtype(op, name, t, like_name, like);
}

// dropout_forward (positive_bits null) or dropout_forward_positive_bits (positive_bits: checked by
// the caller, [dropout_keep_bits_words(1, n)] i32).
void apply_dropout(const char* op, const Tensor& x, Tensor& y, float p, const RngKey& key,
                   const Tensor* positive_bits = nullptr) {
  check_same(op, "output", y, "input", x);
  detail::require_dropout_p(op, p);
  detail::require_on_gpu(op, {{"input", &x}, {"output", &y}});
  if (positive_bits != nullptr) detail::require_on_gpu(op, {{"positive_bits", positive_bits}});
  const int64_t n = x.numel();
  if (n == 0) return;
  cudaStream_t stream = current_stream();
  if (p == 0.0f && positive_bits == nullptr) {
    if (x.data != y.data)
      CUDA_CHECK(cudaMemcpyAsync(y.data, x.data, x.bytes(), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const float keep_scale =
      1.0f / (1.0f - p);  // the CPU's expression, so f32 results match bit for bit
  dispatch_float_dtype(x.dtype, op, "input", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto address_ok = [](const void* ptr) {
      return reinterpret_cast<uintptr_t>(ptr) % (kDropoutBlockElements * sizeof(T)) == 0;
    };
    const unsigned blocks =
        blocks_for((n + kDropoutBlockElements - 1) / kDropoutBlockElements, kThreads);
    const T* in = static_cast<const T*>(x.data);
    T* out = static_cast<T*>(y.data);
    const bool packed = address_ok(x.data) && address_ok(y.data);
    if (positive_bits != nullptr) {
      auto* bytes = static_cast<uint8_t*>(positive_bits->data);
      const int64_t bytes_end = 4 * dropout_keep_bits_words(1, n);
      if (packed)
        dropout_kernel<T, true, true>
            <<<blocks, kThreads, 0, stream>>>(in, out, n, p, keep_scale, key, bytes, bytes_end);
      else
        dropout_kernel<T, false, true>
            <<<blocks, kThreads, 0, stream>>>(in, out, n, p, keep_scale, key, bytes, bytes_end);
    } else if (packed) {
      dropout_kernel<T, true, false>
          <<<blocks, kThreads, 0, stream>>>(in, out, n, p, keep_scale, key, nullptr, 0);
    } else {
      dropout_kernel<T, false, false>
          <<<blocks, kThreads, 0, stream>>>(in, out, n, p, keep_scale, key, nullptr, 0);
    }
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void relu_forward(const Tensor& x, Tensor& y) {
  constexpr const char* op = "relu_forward";
  check_same(op, "y", y, "x", x);
  detail::require_on_gpu(op, {{"x", &x}, {"y", &y}});
  launch_map(op, x, x, y, ReluForwardOp{});
}

void relu_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  constexpr const char* op = "relu_backward";
  check_same(op, "y", y, "dy", dy);
  check_same(op, "dx", dx, "dy", dy);
  detail::require_on_gpu(op, {{"dy", &dy}, {"y", &y}, {"dx", &dx}});
  launch_map(op, dy, y, dx, ReluBackwardOp{});
}

void residual_add(const Tensor& a, const Tensor& b, Tensor& y) {
  constexpr const char* op = "residual_add";
  check_same(op, "b", b, "a", a);
  check_same(op, "y", y, "a", a);
  detail::require_on_gpu(op, {{"a", &a}, {"b", &b}, {"y", &y}});
  launch_map(op, a, b, y, AddOp{});
}

void add_inplace(Tensor& y, const Tensor& x) {
  constexpr const char* op = "add_inplace";
  check_same(op, "x", x, "y", y);
  detail::require_on_gpu(op, {{"y", &y}, {"x", &x}});
  launch_map(op, y, x, y, AddOp{});
}

void scale_inplace(Tensor& y, float s) {
  constexpr const char* op = "scale_inplace";
  detail::require_on_gpu(op, {{"y", &y}});
  launch_map(op, y, y, y, ScaleOp{s});
}

void fill_zero(Tensor& y) {
  constexpr const char* op = "fill_zero";
  detail::require_on_gpu(op, {{"y", &y}});
  if (y.numel() == 0) return;
  // All-zero bytes are 0 in every dtype.
  CUDA_CHECK(cudaMemsetAsync(y.data, 0, y.bytes(), current_stream()));
}

void copy_tensor(const Tensor& src, Tensor& dst) {
  constexpr const char* op = "copy_tensor";
  check_same(op, "dst", dst, "src", src);
  detail::require_data(op, "src", src);
  detail::require_data(op, "dst", dst);
  if (src.numel() == 0 || src.data == dst.data) return;
  cudaStream_t stream = current_stream();
  CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDefault, stream));
  // A copy to the host is a host result: it is complete when the op returns.
  if (dst.device == Device::cpu) CUDA_CHECK(cudaStreamSynchronize(stream));
}

void convert_tensor(const Tensor& src, Tensor& dst) {
  constexpr const char* op = "convert_tensor";
  detail::require_on_gpu(op, {{"src", &src}, {"dst", &dst}});
  const int64_t n = src.numel();
  if (n == 0) return;
  cudaStream_t stream = current_stream();
  dispatch_float_dtype(src.dtype, op, "src", [&](auto src_tag) {
    dispatch_float_dtype(dst.dtype, op, "dst", [&](auto dst_tag) {
      using S = typename decltype(src_tag)::type;
      using D = typename decltype(dst_tag)::type;
      convert_kernel<S, D><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
          static_cast<const S*>(src.data), static_cast<D*>(dst.data), n);
      CUDA_CHECK_LAUNCH();
    });
  });
}

void dropout_forward(const Tensor& x, Tensor& y, float p, const RngKey& key) {
  apply_dropout("dropout_forward", x, y, p, key);
}

void dropout_forward_positive_bits(const Tensor& x, Tensor& y, float p, const RngKey& key,
                                   Tensor& positive_bits) {
  constexpr const char* op = "dropout_forward_positive_bits";
  detail::require_mask_bits(op, "positive_bits", positive_bits, 1, x.numel(),
                            {{"x", &x}, {"y", &y}});
  apply_dropout(op, x, y, p, key, &positive_bits);
}

void dropout_backward(const Tensor& dy, Tensor& dx, float p, const RngKey& key) {
  // The map is linear with a diagonal mask: its backward applies the same mask to dy.
  apply_dropout("dropout_backward", dy, dx, p, key);
}

void dropout_residual_add(const Tensor& a, const Tensor& b, Tensor& y, float p, const RngKey& key) {
  constexpr const char* op = "dropout_residual_add";
  check_same(op, "b", b, "a", a);
  check_same(op, "y", y, "a", a);
  detail::require_dropout_p(op, p);
  detail::require_on_gpu(op, {{"a", &a}, {"b", &b}, {"y", &y}});
  if (p == 0.0f) return launch_map(op, a, b, y, AddOp{});
  const int64_t n = y.numel();
  if (n == 0) return;
  cudaStream_t stream = current_stream();
  const float keep_scale = 1.0f / (1.0f - p);  // as apply_dropout computes it
  dispatch_float_dtype(y.dtype, op, "y", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto address_ok = [](const void* ptr) {
      return reinterpret_cast<uintptr_t>(ptr) % (kDropoutBlockElements * sizeof(T)) == 0;
    };
    const unsigned blocks =
        blocks_for((n + kDropoutBlockElements - 1) / kDropoutBlockElements, kThreads);
    const T* pa = static_cast<const T*>(a.data);
    const T* pb = static_cast<const T*>(b.data);
    T* py = static_cast<T*>(y.data);
    if (address_ok(a.data) && address_ok(b.data) && address_ok(y.data))
      dropout_residual_add_kernel<T, true>
          <<<blocks, kThreads, 0, stream>>>(pa, pb, py, n, p, keep_scale, key);
    else
      dropout_residual_add_kernel<T, false>
          <<<blocks, kThreads, 0, stream>>>(pa, pb, py, n, p, keep_scale, key);
    CUDA_CHECK_LAUNCH();
  });
}

void relu_dropout_backward(const Tensor& dy, const Tensor& y, Tensor& dx, float p) {
  constexpr const char* op = "relu_dropout_backward";
  check_same(op, "y", y, "dy", dy);
  check_same(op, "dx", dx, "dy", dy);
  detail::require_dropout_p(op, p);
  detail::require_on_gpu(op, {{"dy", &dy}, {"y", &y}, {"dx", &dx}});
  launch_map(op, dy, y, dx, ReluDropoutBackwardOp{1.0f / (1.0f - p)});
}

}  // namespace nmt::cuda
