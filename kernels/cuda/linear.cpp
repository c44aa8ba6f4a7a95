// Linear layer on the GPU through cuBLASLt: its three products (the transposed views cuBLAS sees)
// are linear_forward_product, linear_dx_product and linear_dw_product (linear.h); the bias rides
// the forward product's epilogue.
// db = column sums of dy = the sums over k of op(B) in the dW product: cuBLASLt's BGRADB epilogue
// can compute them while that product reads dy anyway (opt-in: blas.h's bias_grad_epilogue). The
// epilogue writes (=) where our contract accumulates (+=: update_freq > 1 sums micro-batches into
// the same gradient), so it writes into scratch and a tiny add of `out` floats follows. Where
// cuBLASLt offers no such algorithm (or there is no dW product) db is the deterministic column sum
// of reduce.h, one kernel that reads dy again.
#include "kernels/cuda/linear.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "kernels/cuda/blas.h"
#include "kernels/cuda/blas_plan.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/stream.h"
#include "kernels/env_switch.h"
#include "kernels/op_checks.h"

namespace nmt::cuda {
namespace {

void require_float(const char* op, const char* name, const Tensor& t) {
  if (t.dtype != DType::f32 && t.dtype != DType::bf16 && t.dtype != DType::f16)
    throw std::invalid_argument(std::string(op) + ": " + name + " must be f32, bf16 or f16, got " +
                                t.shape_string());
}

}  // namespace

LtMatmul linear_forward_product(int64_t rows, int64_t in, int64_t out, DType t, bool relu) {
  LtMatmul g;
  g.trans_a = CUBLAS_OP_T;
  g.trans_b = CUBLAS_OP_N;
  g.m = out;
  g.n = rows;
  g.k = in;
  g.lda = in;
  g.ldb = in;
  g.ldc = out;
  g.ab_type = t;
  g.c_type = t;
  g.relu = relu;
  return g;
}

LtMatmul linear_dx_product(int64_t rows, int64_t in, int64_t out, DType t, bool add_dx) {
  LtMatmul g;
  g.m = in;
  g.n = rows;
  g.k = out;
  g.lda = in;
  g.ldb = out;
  g.ldc = in;
  g.ab_type = t;
  g.c_type = t;
  g.accumulate = add_dx;
  return g;
}

LtMatmul linear_dw_product(int64_t rows, int64_t in, int64_t out, DType t) {
  LtMatmul g;
  g.trans_b = CUBLAS_OP_T;
  g.m = in;
  g.n = out;
  g.k = rows;
  g.lda = in;
  g.ldb = out;
  g.ldc = in;
  g.ab_type = t;
  g.c_type = DType::f32;
  g.accumulate = true;
  return g;
}

namespace {

void linear_forward_epilogue(const char* op, const Tensor& x, const Tensor& w, const Tensor& b,
                             Tensor& y, bool relu) {
  detail::require_rank(op, "x", x, 2);
  detail::require_rank(op, "w", w, 2);
  const int64_t rows = x.dim(0), in = x.dim(1), out = w.dim(0);
  check_shape(op, "w", w, {out, in});
  check_shape(op, "y", y, {rows, out});
  require_float(op, "x", x);
  detail::require_same_dtype(op, "w", w, "x", x);
  detail::require_same_dtype(op, "y", y, "x", x);
  if (!b.empty()) {
    check_shape(op, "b", b, {out});
    detail::require_same_dtype(op, "b", b, "x", x);
  }
  detail::require_on_gpu(op, {{"x", &x}, {"w", &w}, {"y", &y}});
  detail::require_optional_on_gpu(op, {{"b", &b}});
  if (rows == 0 || out == 0) return;
  if (in == 0)
    throw std::invalid_argument(std::string(op) + ": x " + x.shape_string() + " has no columns");
  lt_matmul(linear_forward_product(rows, in, out, x.dtype, relu), w.data, x.data, y.data,
            b.empty() ? nullptr : b.data, 1.0f, current_stream());
}

}  // namespace

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  linear_forward_epilogue("linear_forward", x, w, b, y, false);
}

void linear_relu_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  linear_forward_epilogue("linear_relu_forward", x, w, b, y, true);
}

namespace {

// dx = dy w (or +=, add_dx): dxᵀ (in x rows) = W (in x out) · dyᵀ (out x rows).
void input_grad_product(const Tensor& dy, const Tensor& w, Tensor& dx, bool add_dx,
                        cudaStream_t stream) {
  const int64_t rows = dy.dim(0), out = w.dim(0), in = w.dim(1);
  if (out == 0) {
    if (!add_dx) CUDA_CHECK(cudaMemsetAsync(dx.data, 0, dx.bytes(), stream));
    return;
  }
  // With add_dx, dx += dy W is summed in f32 with dx's old value and rounded once.
  lt_matmul(linear_dx_product(rows, in, out, w.dtype, add_dx), w.data, dy.data, dx.data, nullptr,
            1.0f, stream);
}

// dw += dyᵀ x (f32), and db += the column sums of dy when db is not empty; on `stream`, which
// must be the current stream (add_inplace runs there).
void weight_and_bias_grads(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& db,
                           cudaStream_t stream) {
  const int64_t rows = x.dim(0), in = x.dim(1), out = dy.dim(1);
  const LtMatmul g = linear_dw_product(rows, in, out, x.dtype);
  if (!db.empty()) {
    auto* db_step =
        static_cast<float*>(stream_resources(stream).scratch(static_cast<size_t>(out) * 4));
    if (lt_matmul_bias_grad(g, x.data, dy.data, dw.data, db_step, 1.0f, stream)) {
      const Tensor step_sums(db_step, DType::f32, Device::cuda, {out});
      add_inplace(db, step_sums);
      return;
    }
  }
  lt_matmul(g, x.data, dy.data, dw.data, nullptr, 1.0f, stream);
  if (!db.empty()) accumulate_column_sums(dy, static_cast<float*>(db.data), stream);
}

EnvSwitch weight_grad_stream_switch("NMT_WEIGHT_GRAD_STREAM", /*default_on=*/false);

// The largest weight gradient (out x in elements) that runs beside its dx product: above it, the
// dW product fills the GPU on its own and the two only slow each other (NMT_WEIGHT_GRAD_STREAM_MAX
// sets it, for measurements).
int64_t weight_grad_stream_max_elements() {
  static const int64_t limit = [] {
    const char* text = std::getenv("NMT_WEIGHT_GRAD_STREAM_MAX");
    return text != nullptr && *text != '\0' ? std::atoll(text) : int64_t{1} << 20;
  }();
  return limit;
}

}  // namespace

void set_weight_grad_stream(bool on) {
  weight_grad_stream_switch.set(on);
}

bool weight_grad_stream() {
  return weight_grad_stream_switch.get();
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                     Tensor& db, bool add_dx) {
  constexpr const char* op = "linear_backward";
  detail::require_rank(op, "x", x, 2);
  detail::require_rank(op, "w", w, 2);
  const int64_t rows = x.dim(0), in = x.dim(1), out = w.dim(0);
  check_shape(op, "w", w, {out, in});
  check_shape(op, "dy", dy, {rows, out});
  require_float(op, "x", x);
  detail::require_same_dtype(op, "w", w, "x", x);
  detail::require_same_dtype(op, "dy", dy, "x", x);
  if (!dx.empty()) {
    check_shape(op, "dx", dx, {rows, in});
    detail::require_same_dtype(op, "dx", dx, "x", x);
  }
  if (!dw.empty()) {
    check_shape(op, "dw", dw, {out, in});
    detail::require_dtype(op, "dw", dw, DType::f32);
  }
  if (!db.empty()) {
    check_shape(op, "db", db, {out});
    detail::require_dtype(op, "db", db, DType::f32);
  }
  detail::require_on_gpu(op, {{"dy", &dy}, {"x", &x}, {"w", &w}});
  detail::require_optional_on_gpu(op, {{"dx", &dx}, {"dw", &dw}, {"db", &db}});
  if (rows == 0) return;
  cudaStream_t stream = current_stream();
  const bool weight_grads = !dw.empty() && in > 0 && out > 0;
  const bool input_grad = !dx.empty() && in > 0;
  // Both products at once: the weight gradient (and the bias's column sums) on the stream's side
  // stream, the input gradient here. Neither writes what the other reads (dx aliases none of dy, x,
  // w; dw and db are only the side's), and this stream waits for the side before it goes on, so to
  // the caller the op is ordered as before and its bits are the same.
  // A side stream is first used outside a graph capture: creating it and its workspace allocates,
  // which would end the capture.
  StreamResources& resources = stream_resources(stream);
  const bool beside = weight_grads && input_grad && weight_grad_stream() &&
                      in * out <= weight_grad_stream_max_elements() &&
                      (resources.has_side_stream() || !stream_is_capturing(stream));
  if (beside) {
    OwnedStream& side = resources.side_stream();
    side.wait_for(stream);
    {
      StreamScope on_side(side.get());
      weight_and_bias_grads(dy, x, dw, db, side.get());
    }
    input_grad_product(dy, w, dx, add_dx, stream);
    side.make_wait(stream);
    return;
  }
  if (input_grad) input_grad_product(dy, w, dx, add_dx, stream);
  if (weight_grads) {
    weight_and_bias_grads(dy, x, dw, db, stream);
  } else if (!db.empty() && out > 0) {
    accumulate_column_sums(dy, static_cast<float*>(db.data), stream);
  }
}

}  // namespace nmt::cuda
