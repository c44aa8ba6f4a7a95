// The fused feed-forward product (kernels/cuda/linear_relu_dropout.h) against the two-kernel path
// it replaces and the CPU reference, at odd shapes (rows off the 128-row tile, in off the 64-column
// k-block, out off the 256-column tile): the dropout mask element for element, y within the two
// paths' roundings, the bits of y > 0 from its own y, the step read from device memory, capture in
// a CUDA graph, and the fallback where the kernel cannot run.
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/graph.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/linear_relu_dropout.h"
#include "kernels/cuda/stream.h"
#include "kernels/linear.h"
#include "kernels/philox.h"
#include "test/cuda/gpu_test_util.h"
#include "test/support/catch.h"

namespace nmt::test {
namespace {

bool bit(const std::vector<int32_t>& words, int64_t e) {
  return ((static_cast<uint32_t>(words[e / 32]) >> (e % 32)) & 1u) != 0;
}

struct Inputs {
  int64_t rows, in, out;
  DType dtype;
  GpuTensor x, w, b;
  std::vector<float> xs, ws, bs;  // the values as the GPU holds them (rounded to dtype)
};

Inputs make_inputs(int64_t rows, int64_t in, int64_t out, DType dtype) {
  const uint64_t seed = static_cast<uint64_t>(rows * 131 + in * 7 + out);
  const float bound = 1.0f / std::sqrt(static_cast<float>(in));
  std::vector<float> xs = rounded(random_floats(rows * in, seed), dtype);
  std::vector<float> ws = rounded(random_floats(out * in, seed + 1, -bound, bound), dtype);
  std::vector<float> bs = rounded(random_floats(out, seed + 2, -0.2f, 0.2f), dtype);
  Inputs r{rows,
           in,
           out,
           dtype,
           upload(xs, {rows, in}, dtype),
           upload(ws, {out, in}, dtype),
           upload(bs, {out}, dtype),
           xs,
           ws,
           bs};
  return r;
}

}  // namespace

TEST_CASE(
    "cuda linear_relu_dropout_forward: the fused kernel against the two-kernel path and "
    "the CPU",
    "[cuda][linear][dropout]") {
  const RngKey key{20261128, 77, 5};
  struct Case {
    int64_t rows, in, out;
  };
  const Case cases[] = {{1, 8, 32},        {77, 72, 288},     {300, 520, 544},
                        {1000, 512, 2048}, {129, 1024, 4096}, {4096, 512, 2048}};
  bool fused_ran = false;
  for (DType dtype : {DType::bf16, DType::f16})
    for (const Case& c : cases)
      for (float p : {0.0f, 0.1f, 0.3f}) {
        const int64_t rows = c.rows, out = c.out, n = rows * out;
        INFO("dtype " << dtype_name(dtype) << " rows " << rows << " in " << c.in << " out " << out
                      << " p " << p);
        Inputs in = make_inputs(rows, c.in, out, dtype);
        const int64_t words = dropout_keep_bits_words(rows, out);
        GpuTensor y = gpu_poisoned({rows, out}, dtype), bits = gpu_poisoned({words}, DType::i32);
        GpuTensor y2 = gpu_poisoned({rows, out}, dtype), bits2 = gpu_poisoned({words}, DType::i32);
        const bool fused = cuda::fused_linear_relu_dropout(in.x.view, in.w.view, in.b.view, p, key,
                                                           y.view, bits.view);
        if (!fused) {
          WARN("skipped: the fused kernel needs an sm_90a build on a compute-9.0 GPU");
          return;
        }
        fused_ran = true;
        cuda::set_fused_linear_relu_dropout(false);
        cuda::linear_relu_dropout_forward(in.x.view, in.w.view, in.b.view, p, key, y2.view,
                                          bits2.view);
        cuda::set_fused_linear_relu_dropout(true);
        const std::vector<float> got = download(y.view), two = download(y2.view);
        const std::vector<int32_t> got_bits = download_i32(bits.view);

        // The CPU reference in f32 on the same (rounded) inputs.
        std::vector<float> ref(n);
        std::vector<int32_t> ref_bits(words);
        Tensor ref_view = cpu_view(ref, {rows, out}),
               ref_bits_view = cpu_view_i32(ref_bits, {words});
        linear_relu_dropout_forward(cpu_view(in.xs, {rows, c.in}), cpu_view(in.ws, {out, c.in}),
                                    cpu_view(in.bs, {out}), p, key, ref_view, ref_bits_view);

        const double ulp = dtype == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;
        int64_t far_two = 0, far_ref = 0, wrong_mask = 0, wrong_bits = 0;
        for (int64_t e = 0; e < n; ++e) {
          if (!dropout_keep(key, e, p) && got[e] != 0.0f) ++wrong_mask;
          if (bit(got_bits, e) != (got[e] > 0.0f)) ++wrong_bits;
          // The products summed in another order: a unit in the last place, or two where a sum
          // sits on a rounding boundary of both roundings.
          if (std::fabs(got[e] - two[e]) > 2 * ulp * std::fabs(two[e]) + 1e-6) ++far_two;
          if (std::fabs(got[e] - ref[e]) > ulp * std::fabs(ref[e]) + 1e-3) ++far_ref;
        }
        CHECK(wrong_mask == 0);
        CHECK(wrong_bits == 0);
        CHECK(far_two == 0);
        CHECK(far_ref == 0);
        // The bits agree with the two-kernel path's and the CPU's but where y sits at 0 within
        // the products' rounding (a sum of both signs that the orders round apart).
        const std::vector<int32_t> two_bits = download_i32(bits2.view);
        int64_t differ = 0;
        for (int64_t e = 0; e < n; ++e)
          if (bit(got_bits, e) != bit(ref_bits, e) || bit(got_bits, e) != bit(two_bits, e))
            differ += std::fabs(ref[e]) > 1e-3 ? 1000000 : 1;
        CHECK(differ <= n / 10000);
      }
  CHECK(fused_ran);
}

TEST_CASE(
    "cuda linear_relu_dropout_forward: the step from device memory, a captured graph, and "
    "the fallback",
    "[cuda][linear][dropout]") {
  const int64_t rows = 515, in = 264, out = 800, words = dropout_keep_bits_words(rows, out);
  Inputs inputs = make_inputs(rows, in, out, DType::bf16);
  const RngKey host_key{99, 1234, 3};
  GpuTensor y = gpu_poisoned({rows, out}, DType::bf16), bits = gpu_poisoned({words}, DType::i32);
  if (!cuda::fused_linear_relu_dropout(inputs.x.view, inputs.w.view, inputs.b.view, 0.1f, host_key,
                                       y.view, bits.view)) {
    WARN("skipped: the fused kernel needs an sm_90a build on a compute-9.0 GPU");
    return;
  }
  const std::vector<float> expected = download(y.view);
  const std::vector<int32_t> expected_bits = download_i32(bits.view);

  // The step in device memory (the training graphs' key), replayed from a captured graph.
  const uint64_t step = host_key.step;
  DeviceBuffer step_buffer(sizeof(uint64_t));
  REQUIRE(cudaMemcpy(step_buffer.data(), &step, sizeof step, cudaMemcpyHostToDevice) ==
          cudaSuccess);
  RngKey device_key = host_key;
  device_key.step = 0;
  device_key.step_on_device = static_cast<const uint64_t*>(step_buffer.data());
  GpuTensor y2 = gpu_poisoned({rows, out}, DType::bf16), bits2 = gpu_poisoned({words}, DType::i32);
  cuda::OwnedStream stream;
  cuda::StreamScope on_stream(stream.get());
  cuda::CapturedGraph graph = cuda::CapturedGraph::capture(stream.get(), [&] {
    cuda::linear_relu_dropout_forward(inputs.x.view, inputs.w.view, inputs.b.view, 0.1f, device_key,
                                      y2.view, bits2.view);
  });
  CHECK(graph.nodes() == 1);  // one kernel: the product and its whole tail
  graph.launch(stream.get());
  check_identical("y from the captured graph", download(y2.view), expected);
  CHECK(download_i32(bits2.view) == expected_bits);

  // Off 16 bytes (x shifted by one element): the fused kernel declines, the two-kernel path runs.
  GpuTensor shifted = upload(inputs.xs, {rows, in}, DType::bf16, 1);
  GpuTensor y3 = gpu_poisoned({rows, out}, DType::bf16), bits3 = gpu_poisoned({words}, DType::i32);
  CHECK_FALSE(cuda::fused_linear_relu_dropout(shifted.view, inputs.w.view, inputs.b.view, 0.1f,
                                              host_key, y3.view, bits3.view));
  cuda::linear_relu_dropout_forward(shifted.view, inputs.w.view, inputs.b.view, 0.1f, host_key,
                                    y3.view, bits3.view);
  const std::vector<float> fallback = download(y3.view);
  for (int64_t e = 0; e < rows * out; e += 7)
    REQUIRE(std::fabs(fallback[e] - expected[e]) <= std::fabs(expected[e]) / 64 + 1e-6);
}

}  // namespace nmt::test
