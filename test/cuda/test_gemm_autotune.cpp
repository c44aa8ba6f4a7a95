// cuBLASLt autotuning (blas.h: set_gemm_autotune) and the algorithms it chooses among: every
// algorithm the heuristic lists computes the product of each epilogue the plans use (none, BIAS,
// RELU_BIAS, BGRADB, accumulate) within the usual tolerance; the linear layer matches the CPU
// reference with autotuning on and off; an accumulating product adds to C exactly once while its
// candidates are timed; and a plan first used inside a graph capture is not timed there.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/blas.h"
#include "kernels/cuda/blas_plan.h"
#include "kernels/cuda/graph.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/stream.h"
#include "kernels/linear.h"
#include "test/cuda/gpu_test_util.h"
#include "test/support/catch.h"

namespace nmt::test {
namespace {

// Inputs of one linear layer: x [rows, in], w [out, in], b [out], dy [rows, out], and the fp32
// gradients' contents before backward: dw_init [out, in], db_init [out].
struct LinearCase {
  int64_t rows, in, out;
  std::vector<float> x, w, b, dy, dw_init, db_init;
  LinearCase(int64_t r, int64_t i, int64_t o, uint64_t seed)
      : rows(r),
        in(i),
        out(o),
        x(random_floats(r * i, seed)),
        w(random_floats(o * i, seed + 1)),
        b(random_floats(o, seed + 2)),
        dy(random_floats(r * o, seed + 3)),
        dw_init(random_floats(o * i, seed + 4)),
        db_init(random_floats(o, seed + 5)) {}
};

// The CPU linear layer: y = x Wᵀ + b, x Wᵀ alone, relu(y), dx, dW = dw_init + dyᵀx, db = db_init +
// column sums of dy. With `dtype` other than f32 the inputs are rounded to it first (the baseline
// of check_close), and the outputs the GPU writes in that dtype are rounded too.
struct CpuLinear {
  std::vector<float> y, y_no_bias, relu_y, dx, dw, db;
};

CpuLinear cpu_linear(const LinearCase& c, DType dtype) {
  std::vector<float> x = rounded(c.x, dtype), w = rounded(c.w, dtype), b = rounded(c.b, dtype),
                     dy = rounded(c.dy, dtype);
  CpuLinear r;
  r.y.resize(c.rows * c.out);
  r.y_no_bias.resize(c.rows * c.out);
  r.dx.resize(c.rows * c.in);
  r.dw = c.dw_init;
  r.db = c.db_init;
  Tensor y = cpu_view(r.y, {c.rows, c.out}), y_no_bias = cpu_view(r.y_no_bias, {c.rows, c.out}),
         dx = cpu_view(r.dx, {c.rows, c.in}), dw = cpu_view(r.dw, {c.out, c.in}),
         db = cpu_view(r.db, {c.out}), none;
  const Tensor xv = cpu_view(x, {c.rows, c.in}), wv = cpu_view(w, {c.out, c.in});
  linear_forward(xv, wv, cpu_view(b, {c.out}), y);
  linear_forward(xv, wv, none, y_no_bias);
  linear_backward(cpu_view(dy, {c.rows, c.out}), xv, wv, dx, dw, db);
  r.relu_y = r.y;
  for (float& v : r.relu_y) v = v > 0 ? v : 0;
  if (dtype != DType::f32) {  // the GPU writes y and dx in the input dtype
    r.y = rounded(r.y, dtype);
    r.y_no_bias = rounded(r.y_no_bias, dtype);
    r.relu_y = rounded(r.relu_y, dtype);
    r.dx = rounded(r.dx, dtype);
  }
  return r;
}

// The GPU linear layer through cuda::linear_* (lt_matmul), checked against the reference `ref`
// (cpu_linear in f32) with the baseline `base` (cpu_linear in `dtype`).
void check_gpu_linear(const LinearCase& c, DType dtype, const CpuLinear& ref,
                      const CpuLinear& base) {
  GpuTensor x = upload(c.x, {c.rows, c.in}, dtype), w = upload(c.w, {c.out, c.in}, dtype),
            b = upload(c.b, {c.out}, dtype), dy = upload(c.dy, {c.rows, c.out}, dtype);
  GpuTensor y = gpu_poisoned({c.rows, c.out}, dtype), relu_y = gpu_poisoned({c.rows, c.out}, dtype),
            dx = gpu_poisoned({c.rows, c.in}, dtype);
  GpuTensor dw = upload(c.dw_init, {c.out, c.in}, DType::f32),
            db = upload(c.db_init, {c.out}, DType::f32);
  cuda::linear_forward(x.view, w.view, b.view, y.view);
  cuda::linear_relu_forward(x.view, w.view, b.view, relu_y.view);
  cuda::linear_backward(dy.view, x.view, w.view, dx.view, dw.view, db.view);
  check_close("y", dtype, download(y.view), ref.y, base.y);
  check_close("relu(y)", dtype, download(relu_y.view), ref.relu_y, base.relu_y);
  check_close("dx", dtype, download(dx.view), ref.dx, base.dx);
  check_close("dw", dtype, download(dw.view), ref.dw, base.dw);
  check_close("db", dtype, download(db.view), ref.db, base.db);
}

// Restores the process-wide switches a test case turns.
struct SettingsGuard {
  bool autotune = cuda::gemm_autotune(), epilogue = cuda::bias_grad_epilogue();
  ~SettingsGuard() {
    cuda::set_gemm_autotune(autotune);
    cuda::set_bias_grad_epilogue(epilogue);
  }
};

}  // namespace

TEST_CASE("every algorithm the heuristic lists computes each epilogue's product",
          "[cuda][blas][autotune]") {
  // linear.cpp's forward (y = x Wᵀ + b, optional ReLU) and dW (dW += dyᵀx, fp32, with BGRADB
  // writing db = column sums of dy) for bf16 inputs; the autotuner picks among these algorithms.
  const LinearCase c(300, 128, 192, 71);
  const DType dtype = DType::bf16;
  const CpuLinear ref = cpu_linear(c, DType::f32), base = cpu_linear(c, dtype);
  GpuTensor x = upload(c.x, {c.rows, c.in}, dtype), w = upload(c.w, {c.out, c.in}, dtype),
            b = upload(c.b, {c.out}, dtype), dy = upload(c.dy, {c.rows, c.out}, dtype);
  cudaStream_t stream = cuda::current_stream();
  void* workspace = cuda::stream_resources(stream).blas_workspace();
  cublasLtHandle_t lt = cuda::lt_handle_for_current_device();

  const cuda::LtMatmul forward = cuda::linear_forward_product(c.rows, c.in, c.out, dtype);
  const cuda::LtMatmul dw_product = cuda::linear_dw_product(c.rows, c.in, c.out, dtype);

  // db as BGRADB writes it: the column sums of dy alone (the reference's db less db_init).
  std::vector<float> ref_sums(c.out), base_sums(c.out);
  for (int64_t j = 0; j < c.out; ++j) {
    ref_sums[j] = ref.db[j] - c.db_init[j];
    base_sums[j] = base.db[j] - c.db_init[j];
  }
  const cuda::LtEpilogue epilogues[] = {cuda::LtEpilogue::none, cuda::LtEpilogue::bias,
                                        cuda::LtEpilogue::relu_bias, cuda::LtEpilogue::bias_grad};
  for (cuda::LtEpilogue epilogue : epilogues) {
    const bool backward = epilogue == cuda::LtEpilogue::bias_grad;
    cuda::LtMatmul g = backward ? dw_product : forward;
    g.relu = epilogue == cuda::LtEpilogue::relu_bias;
    GpuTensor heuristic_sums = gpu_poisoned({c.out}, DType::f32);
    const cuda::LtDescriptors d(g, epilogue, backward ? heuristic_sums.view.data : nullptr);
    std::vector<cublasLtMatmulHeuristicResult_t> offered;
    cuda::lt_heuristic(lt, d, cuda::LtAlignments{}, cuda::kBlasWorkspaceBytes, 16, offered);
    INFO("epilogue " << static_cast<int>(epilogue) << ", " << offered.size() << " algorithms");
    if (!backward) REQUIRE(!offered.empty());
    for (size_t i = 0; i < offered.size(); ++i) {
      INFO("algorithm #" << i << ": " << cuda::describe_algo(offered[i].algo));
      GpuTensor out = backward ? upload(c.dw_init, {c.out, c.in}, DType::f32)
                               : gpu_poisoned({c.rows, c.out}, dtype);
      GpuTensor sums = gpu_poisoned({c.out}, DType::f32);  // BGRADB's output, fresh each time
      const void* vector = backward                             ? sums.view.data
                           : epilogue == cuda::LtEpilogue::none ? nullptr
                                                                : b.view.data;
      const void* a_data = backward ? x.view.data : w.view.data;
      const void* b_data = backward ? dy.view.data : x.view.data;
      const cublasStatus_t status =
          cuda::lt_run(lt, d, offered[i].algo, g, a_data, b_data, out.view.data, vector, 1.0f,
                       workspace, cuda::kBlasWorkspaceBytes, stream);
      if (status != CUBLAS_STATUS_SUCCESS) {  // the autotuner skips such a candidate too
        WARN("listed algorithm #" << i << " did not run: " << cublasGetStatusString(status));
        continue;
      }
      const std::vector<float> result = download(out.view);
      if (backward) {
        check_close("dw += dyᵀx", dtype, result, ref.dw, base.dw);
        check_close("BGRADB column sums", dtype, download(sums.view), ref_sums, base_sums);
      } else if (epilogue == cuda::LtEpilogue::relu_bias) {
        check_close("relu(x Wᵀ + b)", dtype, result, ref.relu_y, base.relu_y);
      } else if (epilogue == cuda::LtEpilogue::bias) {
        check_close("x Wᵀ + b", dtype, result, ref.y, base.y);
      } else {
        check_close("x Wᵀ", dtype, result, ref.y_no_bias, base.y_no_bias);
      }
    }
  }
}

TEST_CASE("cuda linear matches the CPU reference with GEMM autotuning on and off",
          "[cuda][linear][autotune]") {
  SettingsGuard restore;
  struct Shape {
    int64_t rows, in, out;
  };
  const Shape shapes[] = {{257, 512, 2048}, {4099, 72, 40}, {512, 256, 768}, {7, 33, 513}};
  for (DType dtype : {DType::bf16, DType::f16, DType::f32})
    for (const Shape& s : shapes) {
      const LinearCase c(s.rows, s.in, s.out, static_cast<uint64_t>(s.rows + s.out));
      const CpuLinear ref = cpu_linear(c, DType::f32), base = cpu_linear(c, dtype);
      // Off first: the plans made then are tuned at their first use once autotuning is on.
      for (bool autotune : {false, true})
        for (bool epilogue : {false, true}) {  // db by BGRADB (a tuned plan too) or column sums
          cuda::set_gemm_autotune(autotune);
          cuda::set_bias_grad_epilogue(epilogue);
          INFO("autotune " << autotune << " epilogue " << epilogue << " dtype " << dtype_name(dtype)
                           << " rows " << s.rows << " in " << s.in << " out " << s.out);
          check_gpu_linear(c, dtype, ref, base);
        }
    }
}

TEST_CASE("with autotuning on, an accumulating product adds to C exactly once",
          "[cuda][linear][autotune]") {
  SettingsGuard restore;
  cuda::set_gemm_autotune(true);
  const bool epilogue = GENERATE(false, true);  // the plain accumulate plan, or BGRADB's
  cuda::set_bias_grad_epilogue(epilogue);
  INFO("bias-gradient epilogue " << epilogue);
  // A shape no other case (and no other GENERATE pass) uses, so its plan is new and timed at this
  // call. dw_init large against one product, so that a second product added would stand out far
  // beyond the tolerance.
  const DType dtype = DType::bf16;
  LinearCase c(epilogue ? 1203 : 1201, 256, 384, 97);
  for (float& v : c.dw_init) v *= 50.0f;
  const CpuLinear ref = cpu_linear(c, DType::f32), base = cpu_linear(c, dtype);
  GpuTensor x = upload(c.x, {c.rows, c.in}, dtype), w = upload(c.w, {c.out, c.in}, dtype),
            dy = upload(c.dy, {c.rows, c.out}, dtype);
  GpuTensor dw = upload(c.dw_init, {c.out, c.in}, DType::f32),
            db = upload(c.db_init, {c.out}, DType::f32);
  Tensor no_dx;
  const cuda::GemmAutotuneCounts before = cuda::gemm_autotune_counts();
  cuda::linear_backward(dy.view, x.view, w.view, no_dx, dw.view, db.view);
  const std::vector<float> result = download(dw.view);
  // The premise: the heuristic offered this product several algorithms and they were timed. (If
  // it offers BGRADB one algorithm only, nothing is timed and the check below is the plain one.)
  const bool timed = cuda::gemm_autotune_counts().timed > before.timed;
  if (!epilogue) REQUIRE(timed);
  if (epilogue && !timed) WARN("the BGRADB product was not timed: one algorithm offered");
  check_close("dw = dw_init + dyᵀx", dtype, result, ref.dw, base.dw);
  check_close("db", dtype, download(db.view), ref.db, base.db);
  // And the tuned plan's next call adds one more product, as without autotuning.
  cuda::linear_backward(dy.view, x.view, w.view, no_dx, dw.view, db.view);
  std::vector<float> twice = ref.dw, base_twice = base.dw;
  for (size_t i = 0; i < twice.size(); ++i) {
    twice[i] += ref.dw[i] - c.dw_init[i];
    base_twice[i] += base.dw[i] - c.dw_init[i];
  }
  check_close("dw = dw_init + 2 dyᵀx", dtype, download(dw.view), twice, base_twice);
}

TEST_CASE("a plan first used inside a graph capture is not timed there",
          "[cuda][graph][autotune]") {
  SettingsGuard restore;
  cuda::OwnedStream stream;
  cuda::StreamScope on_stream(stream.get());
  const DType dtype = DType::bf16;
  const LinearCase c(1111, 192, 320, 113);  // a shape no other case uses
  const CpuLinear ref = cpu_linear(c, DType::f32), base = cpu_linear(c, dtype);
  GpuTensor x = upload(c.x, {c.rows, c.in}, dtype), w = upload(c.w, {c.out, c.in}, dtype),
            b = upload(c.b, {c.out}, dtype), y = gpu_poisoned({c.rows, c.out}, dtype);
  // The plan is made uncaptured with autotuning off, as a training step's first, uncaptured
  // iteration would (that also allocates the stream's cuBLAS workspace); untimed, it is then
  // first used with autotuning on inside the capture.
  cuda::set_gemm_autotune(false);
  cuda::linear_forward(x.view, w.view, b.view, y.view);
  REQUIRE(cudaStreamSynchronize(stream.get()) == cudaSuccess);
  cuda::set_gemm_autotune(true);
  const long long timed_before = cuda::gemm_autotune_counts().timed;
  GpuTensor y_graph = gpu_poisoned({c.rows, c.out}, dtype);
  cuda::CapturedGraph graph = cuda::CapturedGraph::capture(
      stream.get(), [&] { cuda::linear_forward(x.view, w.view, b.view, y_graph.view); });
  CHECK(cuda::gemm_autotune_counts().timed == timed_before);
  graph.launch(stream.get());
  REQUIRE(cudaStreamSynchronize(stream.get()) == cudaSuccess);
  check_close("y from the graph", dtype, download(y_graph.view), ref.y, base.y);
  // Uncaptured now: the plan is timed, and its result is still the product.
  GpuTensor y_tuned = gpu_poisoned({c.rows, c.out}, dtype);
  cuda::linear_forward(x.view, w.view, b.view, y_tuned.view);
  CHECK(cuda::gemm_autotune_counts().timed > timed_before);
  check_close("y after tuning", dtype, download(y_tuned.view), ref.y, base.y);
}

}  // namespace nmt::test
