// CUDA linear layer (cuBLASLt) against the CPU reference: forward with and without bias, dx, and
// accumulating fp32 dW / db, at odd sizes; db through the dW product's bias-gradient epilogue and
// through the column-sum fallback, over two micro-batches, and bit-identical on a rerun; the weight
// gradient on the side stream the same bits as on one stream, op by op and captured.
#include <utility>
#include <vector>

#include "kernels/cuda/blas.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/graph.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/stream.h"
#include "kernels/linear.h"
#include "test/cuda/gpu_test_util.h"
#include "test/support/catch.h"

namespace nmt::test {
namespace {

struct CpuLinear {
  std::vector<float> y, dx, dw, db;
};

CpuLinear cpu_linear(std::vector<float> x, std::vector<float> w, std::vector<float> b,
                     std::vector<float> dy, const std::vector<float>& dw_init,
                     const std::vector<float>& db_init, int64_t rows, int64_t in, int64_t out,
                     bool bias) {
  CpuLinear r;
  r.y.resize(rows * out);
  r.dx.resize(rows * in);
  r.dw = dw_init;
  r.db = db_init;
  Tensor none, y = cpu_view(r.y, {rows, out}), dx = cpu_view(r.dx, {rows, in}),
               dw = cpu_view(r.dw, {out, in}), db = cpu_view(r.db, {out});
  linear_forward(cpu_view(x, {rows, in}), cpu_view(w, {out, in}), bias ? cpu_view(b, {out}) : none,
                 y);
  linear_backward(cpu_view(dy, {rows, out}), cpu_view(x, {rows, in}), cpu_view(w, {out, in}), dx,
                  dw, bias ? db : none);
  return r;
}

}  // namespace

TEST_CASE("cuda linear matches the CPU reference", "[cuda][linear]") {
  const bool epilogue = GENERATE(true, false);  // db by the BGRADB epilogue, or by column sums
  cuda::set_bias_grad_epilogue(epilogue);
  INFO("bias-gradient epilogue " << epilogue);
  struct Case {
    int64_t rows, in, out;
  };
  const Case cases[] = {{1, 1, 1},    {7, 7, 33},   {100, 64, 64}, {513, 100, 33},
                        {33, 512, 8}, {7, 33, 513}, {256, 128, 96}};
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
    for (const Case& c : cases)
      for (bool bias : {false, true}) {
        const int64_t rows = c.rows, in = c.in, out = c.out;
        INFO("dtype " << dtype_name(dtype) << " rows " << rows << " in " << in << " out " << out
                      << " bias " << bias);
        const uint64_t seed = static_cast<uint64_t>(rows * 1009 + in * 31 + out);
        std::vector<float> x = random_floats(rows * in, seed),
                           w = random_floats(out * in, seed + 1), b = random_floats(out, seed + 2),
                           dy = random_floats(rows * out, seed + 3),
                           dw_init = random_floats(out * in, seed + 4),
                           db_init = random_floats(out, seed + 5);
        const CpuLinear ref = cpu_linear(x, w, b, dy, dw_init, db_init, rows, in, out, bias);
        const CpuLinear base =
            cpu_linear(rounded(x, dtype), rounded(w, dtype), rounded(b, dtype), rounded(dy, dtype),
                       dw_init, db_init, rows, in, out, bias);

        GpuTensor gx = upload(x, {rows, in}, dtype), gw = upload(w, {out, in}, dtype),
                  gb = upload(b, {out}, dtype), gdy = upload(dy, {rows, out}, dtype);
        GpuTensor gy = gpu_poisoned({rows, out}, dtype), gdx = gpu_poisoned({rows, in}, dtype);
        GpuTensor gdw = upload(dw_init, {out, in}, DType::f32),
                  gdb = upload(db_init, {out}, DType::f32);
        Tensor none;
        cuda::linear_forward(gx.view, gw.view, bias ? gb.view : none, gy.view);
        check_close("y", dtype, download(gy.view), ref.y, rounded(base.y, dtype));
        cuda::linear_backward(gdy.view, gx.view, gw.view, gdx.view, gdw.view,
                              bias ? gdb.view : none);
        check_close("dx", dtype, download(gdx.view), ref.dx, rounded(base.dx, dtype));
        check_close("dw", dtype, download(gdw.view), ref.dw, base.dw);
        if (bias) check_close("db", dtype, download(gdb.view), ref.db, base.db);

        // dx added onto a residual gradient (the product's beta = 1): the CPU's old + product.
        {
          const std::vector<float> residual = random_floats(rows * in, seed + 6);
          std::vector<float> ref_sum = ref.dx, base_sum = rounded(base.dx, dtype);
          const std::vector<float> residual_rounded = rounded(residual, dtype);
          for (size_t i = 0; i < ref_sum.size(); ++i) {
            ref_sum[i] += residual[i];
            base_sum[i] += residual_rounded[i];
          }
          GpuTensor gsum = upload(residual, {rows, in}, dtype);
          GpuTensor gdw_add = upload(dw_init, {out, in}, DType::f32);
          cuda::linear_backward(gdy.view, gx.view, gw.view, gsum.view, gdw_add.view, none,
                                /*add_dx=*/true);
          check_close("dx added", dtype, download(gsum.view), ref_sum, rounded(base_sum, dtype));
        }

        // Without dx: dW accumulates a second time, dx stays as it was.
        GpuTensor gdw2 = upload(dw_init, {out, in}, DType::f32);
        cuda::linear_backward(gdy.view, gx.view, gw.view, none, gdw2.view, none);
        check_close("dw without dx", dtype, download(gdw2.view), ref.dw, base.dw);

        // db without a dW product takes the column-sum path; it must agree with the epilogue's.
        if (bias) {
          GpuTensor gdb2 = upload(db_init, {out}, DType::f32);
          Tensor no_dw;
          cuda::linear_backward(gdy.view, gx.view, gw.view, none, no_dw, gdb2.view);
          check_close("db by column sums", dtype, download(gdb2.view), ref.db, base.db);
        }

        // The ReLU epilogue: the CPU reference is the product, then max(., 0).
        std::vector<float> ref_relu = ref.y, base_relu = rounded(base.y, dtype);
        for (float& v : ref_relu) v = v > 0 ? v : 0;
        for (float& v : base_relu) v = v > 0 ? v : 0;
        GpuTensor grelu = gpu_poisoned({rows, out}, dtype);
        cuda::linear_relu_forward(gx.view, gw.view, bias ? gb.view : none, grelu.view);
        check_close("relu(y)", dtype, download(grelu.view), ref_relu, base_relu);
      }
}

TEST_CASE("cuda linear backward accumulates db over micro-batches, the same bits every run",
          "[cuda][linear]") {
  const bool epilogue = GENERATE(true, false);
  cuda::set_bias_grad_epilogue(epilogue);
  INFO("bias-gradient epilogue " << epilogue);
  // db (and dW) are accumulated (+=) by contract: with update_freq > 1 the second micro-batch adds
  // to the first one's sums. The bias-gradient epilogue writes, so this pins the add that follows
  // it. Rows 4099 make cuBLASLt's k long enough for split-k algorithms.
  struct Case {
    int64_t rows, in, out;
  };
  const Case cases[] = {{33, 64, 96}, {4099, 72, 40}, {257, 512, 2048}};
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
    for (const Case& c : cases) {
      const int64_t rows = c.rows, in = c.in, out = c.out;
      INFO("dtype " << dtype_name(dtype) << " rows " << rows << " in " << in << " out " << out);
      const uint64_t seed = static_cast<uint64_t>(rows * 7 + in * 5 + out);
      std::vector<float> x1 = random_floats(rows * in, seed),
                         x2 = random_floats(rows * in, seed + 1),
                         w = random_floats(out * in, seed + 2),
                         dy1 = random_floats(rows * out, seed + 3),
                         dy2 = random_floats(rows * out, seed + 4),
                         db_init = random_floats(out, seed + 5);
      const std::vector<float> dw_init(out * in, 0.0f);
      // The reference: both micro-batches through the CPU op, in order.
      auto cpu_two = [&](const std::vector<float>& a1, const std::vector<float>& a2,
                         const std::vector<float>& wv, const std::vector<float>& g1,
                         const std::vector<float>& g2) {
        std::vector<float> dw = dw_init, db = db_init, a1c = a1, a2c = a2, wc = wv, g1c = g1,
                           g2c = g2;
        Tensor none, dwv = cpu_view(dw, {out, in}), dbv = cpu_view(db, {out});
        linear_backward(cpu_view(g1c, {rows, out}), cpu_view(a1c, {rows, in}),
                        cpu_view(wc, {out, in}), none, dwv, dbv);
        linear_backward(cpu_view(g2c, {rows, out}), cpu_view(a2c, {rows, in}),
                        cpu_view(wc, {out, in}), none, dwv, dbv);
        return std::pair{dw, db};
      };
      const auto [ref_dw, ref_db] = cpu_two(x1, x2, w, dy1, dy2);
      const auto [base_dw, base_db] =
          cpu_two(rounded(x1, dtype), rounded(x2, dtype), rounded(w, dtype), rounded(dy1, dtype),
                  rounded(dy2, dtype));
      GpuTensor gx1 = upload(x1, {rows, in}, dtype), gx2 = upload(x2, {rows, in}, dtype),
                gw = upload(w, {out, in}, dtype), gdy1 = upload(dy1, {rows, out}, dtype),
                gdy2 = upload(dy2, {rows, out}, dtype);
      std::vector<float> first_dw, first_db;
      for (int run = 0; run < 2; ++run) {
        GpuTensor gdw = upload(dw_init, {out, in}, DType::f32),
                  gdb = upload(db_init, {out}, DType::f32);
        GpuTensor gdx = gpu_poisoned({rows, in}, dtype);
        cuda::linear_backward(gdy1.view, gx1.view, gw.view, gdx.view, gdw.view, gdb.view);
        cuda::linear_backward(gdy2.view, gx2.view, gw.view, gdx.view, gdw.view, gdb.view);
        const std::vector<float> dw = download(gdw.view), db = download(gdb.view);
        if (run == 0) {
          check_close("dw over two micro-batches", dtype, dw, ref_dw, base_dw);
          check_close("db over two micro-batches", dtype, db, ref_db, base_db);
          first_dw = dw;
          first_db = db;
        } else {
          check_identical("dw rerun", dw, first_dw);
          check_identical("db rerun", db, first_db);
        }
      }
    }
}

TEST_CASE("cuda linear backward: the weight gradient beside the input gradient, the same bits",
          "[cuda][linear]") {
  // dW and db run on the side stream, dx here; the caller's stream must see them done when the
  // call returns: a kernel enqueued right after it reads dw and db (copied into zeroed buffers),
  // op by op on the legacy stream, on a stream of its own, and inside a captured graph.
  struct Case {
    int64_t rows, in, out;
  };
  const Case cases[] = {{2049, 512, 512}, {301, 96, 40}, {1000, 512, 2048}};
  // The process-wide switch as the other cases expect it (off by default), whatever happens here.
  struct RestoreSwitch {
    bool was = cuda::weight_grad_stream();
    ~RestoreSwitch() { cuda::set_weight_grad_stream(was); }
  } restore;
  for (DType dtype : {DType::f32, DType::bf16})
    for (const Case& c : cases) {
      const int64_t rows = c.rows, in = c.in, out = c.out;
      INFO("dtype " << dtype_name(dtype) << " rows " << rows << " in " << in << " out " << out);
      const uint64_t seed = static_cast<uint64_t>(rows * 3 + in * 11 + out);
      const std::vector<float> x = random_floats(rows * in, seed),
                               w = random_floats(out * in, seed + 1),
                               dy = random_floats(rows * out, seed + 2),
                               residual = random_floats(rows * in, seed + 3),
                               dw_init = random_floats(out * in, seed + 4),
                               db_init = random_floats(out, seed + 5);
      const std::vector<float> zeros_w(out * in, 0.0f), zeros_b(out, 0.0f);
      GpuTensor gx = upload(x, {rows, in}, dtype), gw = upload(w, {out, in}, dtype),
                gdy = upload(dy, {rows, out}, dtype);
      struct Result {
        std::vector<float> dx, dw, db, dw_seen, db_seen;
      };
      struct Buffers {
        GpuTensor dx, dw, db, dw_seen, db_seen;
      };
      auto fresh = [&] {
        return Buffers{upload(residual, {rows, in}, dtype), upload(dw_init, {out, in}, DType::f32),
                       upload(db_init, {out}, DType::f32), upload(zeros_w, {out, in}, DType::f32),
                       upload(zeros_b, {out}, DType::f32)};
      };
      auto enqueue = [&](Buffers& b) {
        cuda::linear_backward(gdy.view, gx.view, gw.view, b.dx.view, b.dw.view, b.db.view,
                              /*add_dx=*/true);
        cuda::add_inplace(b.dw_seen.view, b.dw.view);  // on the caller's stream, right after
        cuda::add_inplace(b.db_seen.view, b.db.view);
      };
      auto read = [](Buffers& b) {
        return Result{download(b.dx.view), download(b.dw.view), download(b.db.view),
                      download(b.dw_seen.view), download(b.db_seen.view)};
      };
      auto same = [](const std::string& what, const Result& a, const Result& b) {
        INFO(what);
        check_identical("dx", a.dx, b.dx);
        check_identical("dw", a.dw, b.dw);
        check_identical("db", a.db, b.db);
        check_identical("dw seen after the call", a.dw_seen, b.dw_seen);
        check_identical("db seen after the call", a.db_seen, b.db_seen);
      };

      cuda::set_weight_grad_stream(false);
      Buffers one = fresh();
      enqueue(one);
      const Result reference = read(one);
      check_identical("dw seen after the call, one stream", reference.dw_seen, reference.dw);

      cuda::set_weight_grad_stream(true);
      Buffers legacy = fresh();
      enqueue(legacy);
      same("side stream, legacy caller", reference, read(legacy));

      cuda::OwnedStream stream;
      Buffers owned = fresh();
      {
        cuda::StreamScope scope(stream.get());
        enqueue(owned);
      }
      CUDA_CHECK(cudaStreamSynchronize(stream.get()));
      same("side stream, owned caller", reference, read(owned));

      Buffers captured = fresh();
      const cuda::CapturedGraph graph =
          cuda::CapturedGraph::capture(stream.get(), [&] { enqueue(captured); });
      graph.launch(stream.get());
      CUDA_CHECK(cudaStreamSynchronize(stream.get()));
      same("side stream, captured and replayed", reference, read(captured));
    }
}

}  // namespace nmt::test
