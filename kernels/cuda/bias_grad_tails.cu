// The backward tails that also add a bias gradient: dropout_backward and relu_dropout_backward
// writing dx and adding its column sums into db in one launch. The grid, lanes and ordered
// reduction are the column sums' (column_sums.cuh): each thread writes its VEC columns of the rows
// of its part and adds the stored (rounded) values in row order, so db gets exactly what
// accumulate_column_sums would add after the unfused op, without reading dx back.
#include <stdexcept>
#include <string>

#include "kernels/cuda/bias_grad_tails.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/dropout_mask.cuh"
#include "kernels/cuda/stream.h"
#include "kernels/op_checks.h"

namespace nmt::cuda {
namespace {

// A gradient functor: grad(element, dy, y, dx) writes dx for VEC consecutive elements of one row
// starting at flat index `element`, from dy (and y where kReadsY). Each is the unfused op's
// arithmetic: one product, rounded to T once.

// dropout_backward with p == 0: a copy (the bits of dy, as the unfused op's memcpy).
struct CopyGrad {
  static constexpr bool kReadsY = false;
  static constexpr int kMinBlocks = 4;  // blocks per multiprocessor (__launch_bounds__)
  template <typename T, int VEC>
  __device__ void operator()(int64_t, const Pack<T, VEC>& dy, const Pack<T, VEC>&,
                             Pack<T, VEC>& dx) const {
    dx = dy;
  }
};

// dropout_backward: dy times the regenerated mask's scale (dropout_kernel's product), or, given
// keep_bytes (the mask the forward saved, kernels/philox.h), the scale of its bit: the same
// factors.
struct DropoutGrad {
  static constexpr bool kReadsY = false;
  static constexpr int kMinBlocks = 3;  // the Philox draws hold more registers
  float p, keep_scale;
  RngKey key;
  const uint8_t* keep_bytes;  // null: draw
  template <typename T, int VEC>
  __device__ void operator()(int64_t element, const Pack<T, VEC>& dy, const Pack<T, VEC>&,
                             Pack<T, VEC>& dx) const {
    static_assert(VEC == 1 || VEC == 4 || VEC == 8,
                  "a pack holds one Philox block, half of one, or one element");
    // The pack's keep bits, bit i for element element + i: from the saved mask (bit e % 8 of byte
    // e / 8; a pack of VEC elements from a multiple of VEC, or one element, lies within one byte)
    // or drawn (cols % VEC == 0, so the pack starts at a multiple of VEC: one Philox block, half
    // of one, or one element's).
    const uint32_t bits = keep_bytes != nullptr
                              ? static_cast<uint32_t>(keep_bytes[element / 8]) >> (element % 8)
                              : dropout_keep_bits<VEC>(key, element, p);
#pragma unroll
    for (int i = 0; i < VEC; ++i)
      dx.v[i] = from_float<T>(to_float(dy.v[i]) * dropout_bit_scale(bits, i, keep_scale));
  }
};

// relu_dropout_backward: dy / (1 - p) where the forward output y > 0, else 0
// (ReluDropoutBackwardOp of elementwise.cu).
struct ReluDropoutGrad {
  static constexpr bool kReadsY = true;
  static constexpr int kMinBlocks = 4;
  float keep_scale;
  template <typename T, int VEC>
  __device__ void operator()(int64_t, const Pack<T, VEC>& dy, const Pack<T, VEC>& y,
                             Pack<T, VEC>& dx) const {
#pragma unroll
    for (int i = 0; i < VEC; ++i)
      dx.v[i] = from_float<T>(to_float(y.v[i]) > 0.0f ? to_float(dy.v[i]) * keep_scale : 0.0f);
  }
};

// relu_dropout_backward from the bits of y > 0 (dropout_forward_positive_bits) instead of y: the
// select and product of ReluDropoutGrad, so the same bits. A pack of VEC elements from a multiple
// of VEC (or one element) lies within one byte of the mask.
struct ReluDropoutBitsGrad {
  static constexpr bool kReadsY = false;
  static constexpr int kMinBlocks = 4;
  float keep_scale;
  const uint8_t* positive_bytes;
  template <typename T, int VEC>
  __device__ void operator()(int64_t element, const Pack<T, VEC>& dy, const Pack<T, VEC>&,
                             Pack<T, VEC>& dx) const {
    static_assert(VEC == 1 || VEC == 4 || VEC == 8, "a pack lies within one byte of the mask");
    const uint32_t bits = static_cast<uint32_t>(positive_bytes[element / 8]) >> (element % 8);
#pragma unroll
    for (int i = 0; i < VEC; ++i)
      dx.v[i] = from_float<T>((bits >> i) & 1u ? to_float(dy.v[i]) * keep_scale : 0.0f);
  }
};

template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> load_pack(const T* at) {
  return *reinterpret_cast<const Pack<T, VEC>*>(at);
}

// Writes dx's VEC elements at `element` and adds the stored values to acc.
template <typename T, int VEC, typename Grad>
__device__ __forceinline__ void write_and_add(const Grad& grad, int64_t element,
                                              const Pack<T, VEC>& dy, const Pack<T, VEC>& y, T* dx,
                                              float (&acc)[VEC]) {
  Pack<T, VEC> out;
  grad(element, dy, y, out);
  store_pack(dx + element, out);
#pragma unroll
  for (int i = 0; i < VEC; ++i) acc[i] += to_float(out.v[i]);
}

// dy, y, dx: [rows, cols] T, 16-byte aligned with cols % VEC == 0 where VEC > 1; y is read only
// where Grad::kReadsY; dx may alias dy (each element is read and written by one thread, the read
// first). partials, counters, db: as column_sums::store_block_parts / finish_tile. The grid covers
// tiles first_tile, first_tile + 1, ..., each with blocks of parts_per_block row parts.
template <typename T, int VEC, typename Grad>
__global__ void __launch_bounds__(column_sums::kThreads, Grad::kMinBlocks)
    bias_grad_tail_kernel(const T* dy, const T* y, T* dx, int64_t rows, int64_t cols,
                          int64_t rows_per_part, int64_t parts, int64_t parts_per_block,
                          int64_t first_tile, Grad grad, float* __restrict__ partials,
                          unsigned* __restrict__ counters, float* __restrict__ db) {
  using L = column_sums::Layout<VEC>;
  constexpr int kRowUnroll = column_sums::kRowUnroll;
  extern __shared__ float4 column_sums_slots[];  // column_sums::slot_bytes<VEC>(parts_per_block)
  const column_sums::TileShared<VEC> shared{reinterpret_cast<float*>(column_sums_slots)};
  const int64_t tile_col = (first_tile + blockIdx.x) * L::kTileCols;
  const int64_t col = tile_col + threadIdx.x * VEC;  // the first of this thread's VEC columns
  const int64_t first_part = blockIdx.y * parts_per_block;
  const int64_t end_part = min(parts, first_part + parts_per_block);
  for (int64_t part = first_part; part < end_part; ++part) {
    float acc[VEC] = {};
    if (col < cols) {  // with VEC > 1, cols % VEC == 0: all VEC columns are in range, or none
      const int64_t end = min(rows, (part + 1) * rows_per_part);
      int64_t r = part * rows_per_part + threadIdx.y;
      // kRowUnroll rows' loads in flight, then each row written and added in row order.
      for (; r + (kRowUnroll - 1) * L::kLanesY < end; r += kRowUnroll * L::kLanesY) {
        Pack<T, VEC> g[kRowUnroll], v[kRowUnroll] = {};
#pragma unroll
        for (int u = 0; u < kRowUnroll; ++u) {
          const int64_t at = (r + u * L::kLanesY) * cols + col;
          g[u] = load_pack<T, VEC>(dy + at);
          if constexpr (Grad::kReadsY) v[u] = load_pack<T, VEC>(y + at);
        }
#pragma unroll
        for (int u = 0; u < kRowUnroll; ++u)
          write_and_add<T, VEC>(grad, (r + u * L::kLanesY) * cols + col, g[u], v[u], dx, acc);
      }
      for (; r < end; r += L::kLanesY) {
        const int64_t at = r * cols + col;
        Pack<T, VEC> v = {};
        if constexpr (Grad::kReadsY) v = load_pack<T, VEC>(y + at);
        write_and_add<T, VEC>(grad, at, load_pack<T, VEC>(dy + at), v, dx, acc);
      }
    }
    column_sums::store_slot_sums<VEC>(shared, static_cast<int>(part - first_part), acc);
  }
  column_sums::store_block_parts<VEC>(shared, first_part, static_cast<int>(end_part - first_part),
                                      parts, tile_col, cols, partials, db);
  column_sums::finish_tile<VEC>(shared, parts, tile_col, cols, partials, counters, db);
}

template <typename T, int VEC, typename Grad>
void launch_tail(const T* dy, const T* y, T* dx, int64_t rows, int64_t cols, const Grad& grad,
                 float* db, cudaStream_t stream) {
  using L = column_sums::Layout<VEC>;
  const column_sums::Grid grid = column_sums::plan_grid(rows, cols, L::kTileCols, stream);
  for (int64_t first = 0; first < grid.tiles; first += grid.tiles_per_launch) {
    bias_grad_tail_kernel<T, VEC, Grad>
        <<<grid.launch_grid(first), dim3(L::kLanesX, L::kLanesY),
           column_sums::slot_bytes<VEC>(grid.parts_per_block), stream>>>(
            dy, y, dx, rows, cols, grid.rows_per_part, grid.parts, grid.parts_per_block, first,
            grad, grid.partials, grid.counters, db);
    CUDA_CHECK_LAUNCH();
  }
}

// Checks the call (y: nullptr where the op has none) and runs it: the 16-byte path where every
// matrix is aligned and cols a multiple of the pack width, one element per thread otherwise.
template <typename Grad>
void run_tail(const char* op, const Tensor& dy, const Tensor* y, Tensor& dx, float p, Tensor& db,
              const Grad& grad) {
  detail::require_rank(op, "dy", dy, 2, "[rows, cols]");
  detail::require_same_shape(op, "dx", dx, "dy", dy);
  detail::require_same_dtype(op, "dx", dx, "dy", dy);
  if (y) {
    detail::require_same_shape(op, "y", *y, "dy", dy);
    detail::require_same_dtype(op, "y", *y, "dy", dy);
  }
  const int64_t rows = dy.dim(0), cols = dy.dim(1);
  check_shape(op, "db", db, {cols});
  detail::require_dtype(op, "db", db, DType::f32);
  detail::require_dropout_p(op, p);
  detail::require_on_gpu(op, {{"dy", &dy}, {"dx", &dx}, {"db", &db}});
  if (y) detail::require_on_gpu(op, {{"y", y}});
  detail::require_disjoint(op, "db", db, "dx", dx);
  detail::require_disjoint(op, "db", db, "dy", dy);
  if (rows == 0 || cols == 0) return;
  cudaStream_t stream = current_stream();
  const bool aligned =
      is_aligned16(dy.data) && is_aligned16(dx.data) && (!y || is_aligned16(y->data));
  dispatch_float_dtype(dy.dtype, op, "dy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kVec = kPackWidth<T>;
    const T* dy_data = static_cast<const T*>(dy.data);
    const T* y_data = y ? static_cast<const T*>(y->data) : nullptr;
    T* dx_data = static_cast<T*>(dx.data);
    float* db_data = static_cast<float*>(db.data);
    if (aligned && cols % kVec == 0)
      launch_tail<T, kVec>(dy_data, y_data, dx_data, rows, cols, grad, db_data, stream);
    else
      launch_tail<T, 1>(dy_data, y_data, dx_data, rows, cols, grad, db_data, stream);
  });
}

}  // namespace

void dropout_backward_bias(const Tensor& dy, Tensor& dx, float p, const RngKey& key, Tensor& db,
                           const Tensor& keep_bits) {
  constexpr const char* op = "dropout_backward_bias";
  detail::require_rank(op, "dy", dy, 2, "[rows, cols]");
  detail::require_keep_bits(op, keep_bits, dy.dim(0), dy.dim(1), {{"dx", &dx}, {"db", &db}});
  detail::require_optional_on_gpu(op, {{"keep_bits", &keep_bits}});
  if (p == 0.0f) return run_tail(op, dy, nullptr, dx, p, db, CopyGrad{});
  // The expression of apply_dropout (elementwise.cu) and of the CPU, so the scales match.
  const float keep_scale = 1.0f / (1.0f - p);
  run_tail(op, dy, nullptr, dx, p, db,
           DropoutGrad{p, keep_scale, key, static_cast<const uint8_t*>(keep_bits.data)});
}

void relu_dropout_backward_bias(const Tensor& dy, const Tensor& y, Tensor& dx, float p, Tensor& db,
                                const Tensor& positive_bits) {
  constexpr const char* op = "relu_dropout_backward_bias";
  if (positive_bits.empty())
    return run_tail(op, dy, &y, dx, p, db, ReluDropoutGrad{1.0f / (1.0f - p)});
  detail::require_rank(op, "dy", dy, 2, "[rows, cols]");
  detail::require_same_shape(op, "y", y, "dy", dy);
  detail::require_same_dtype(op, "y", y, "dy", dy);
  detail::require_mask_bits(op, "positive_bits", positive_bits, dy.dim(0), dy.dim(1),
                            {{"dx", &dx}, {"db", &db}});
  detail::require_on_gpu(op, {{"positive_bits", &positive_bits}});
  run_tail(op, dy, nullptr, dx, p, db,
           ReluDropoutBitsGrad{1.0f / (1.0f - p), static_cast<const uint8_t*>(positive_bits.data)});
}

}  // namespace nmt::cuda
