// CUDA elementwise ops against the CPU reference: ReLU, adds, scaling, dropout (identical masks),
// the fused dropout + residual add and ReLU + dropout backward (equal to the separate ops), fill
// and copy, at odd sizes, in place and off 16-byte alignment; dropout_forward_positive_bits' bits.
#include <cuda_runtime.h>

#include <vector>

#include "kernels/cuda/elementwise.h"
#include "kernels/elementwise.h"
#include "kernels/half_host.h"
#include "test/cuda/gpu_test_util.h"
#include "test/support/catch.h"

namespace nmt::test {
namespace {

const DType kFloatTypes[] = {DType::f32, DType::bf16, DType::f16};
const int64_t kSizes[] = {1, 7, 33, 1000, 4097};

}  // namespace

TEST_CASE("cuda relu, residual_add, add_inplace, scale_inplace match the CPU",
          "[cuda][elementwise]") {
  for (DType dtype : kFloatTypes)
    for (int64_t n : kSizes)
      for (int offset : {0, 1}) {
        INFO("dtype " << dtype_name(dtype) << " n " << n << " offset " << offset);
        const std::vector<int64_t> shape{n};
        std::vector<float> a = rounded(random_floats(n, 11 + n), dtype);
        std::vector<float> b = rounded(random_floats(n, 12 + n), dtype);

        // relu forward / backward
        std::vector<float> relu_ref(n), relu_dx_ref(n);
        Tensor relu_out = cpu_view(relu_ref, shape);
        relu_forward(cpu_view(a, shape), relu_out);
        Tensor relu_dx = cpu_view(relu_dx_ref, shape);
        relu_backward(cpu_view(b, shape), cpu_view(relu_ref, shape), relu_dx);
        GpuTensor ga = upload(a, shape, dtype, offset), gb = upload(b, shape, dtype, offset);
        GpuTensor gy = gpu_poisoned(shape, dtype, offset);
        cuda::relu_forward(ga.view, gy.view);
        check_identical("relu_forward", download(gy.view), rounded(relu_ref, dtype));
        GpuTensor gdx = gpu_poisoned(shape, dtype, offset);
        cuda::relu_backward(gb.view, gy.view, gdx.view);
        check_identical("relu_backward", download(gdx.view), rounded(relu_dx_ref, dtype));
        // in place: dx aliases dy
        cuda::relu_backward(gb.view, gy.view, gb.view);
        check_identical("relu_backward in place", download(gb.view), rounded(relu_dx_ref, dtype));
        gb = upload(b, shape, dtype, offset);

        // residual_add into a third tensor and in place
        std::vector<float> sum_ref(n);
        Tensor sum_view = cpu_view(sum_ref, shape);
        residual_add(cpu_view(a, shape), cpu_view(b, shape), sum_view);
        GpuTensor gsum = gpu_poisoned(shape, dtype, offset);
        cuda::residual_add(ga.view, gb.view, gsum.view);
        check_identical("residual_add", download(gsum.view), rounded(sum_ref, dtype));
        cuda::add_inplace(ga.view, gb.view);
        check_identical("add_inplace", download(ga.view), rounded(sum_ref, dtype));

        // scale_inplace
        std::vector<float> scaled_ref = a;
        Tensor scaled_view = cpu_view(scaled_ref, shape);
        scale_inplace(scaled_view, -0.37f);
        GpuTensor gs = upload(a, shape, dtype, offset);
        cuda::scale_inplace(gs.view, -0.37f);
        check_identical("scale_inplace", download(gs.view), rounded(scaled_ref, dtype));
      }
}

TEST_CASE("cuda dropout draws the CPU's masks", "[cuda][elementwise][dropout]") {
  const RngKey key{20240611, 77, 5};
  for (DType dtype : kFloatTypes)
    for (int64_t n : kSizes)
      for (float p : {0.0f, 0.1f, 0.5f})
        for (int offset : {0, 1}) {
          INFO("dtype " << dtype_name(dtype) << " n " << n << " p " << p << " offset " << offset);
          const std::vector<int64_t> shape{n};
          std::vector<float> x = rounded(nonzero_values(n, 21 + n), dtype);
          std::vector<float> ref(n);
          Tensor ref_view = cpu_view(ref, shape);
          dropout_forward(cpu_view(x, shape), ref_view, p, key);
          GpuTensor gx = upload(x, shape, dtype, offset);
          GpuTensor gy = gpu_poisoned(shape, dtype, offset);
          cuda::dropout_forward(gx.view, gy.view, p, key);
          const std::vector<float> got = download(gy.view);
          check_identical("dropout_forward", got, rounded(ref, dtype));
          // The backward regenerates the same mask; in place (dx aliases dy).
          std::vector<float> back_ref(n);
          Tensor back_view = cpu_view(back_ref, shape);
          dropout_backward(cpu_view(x, shape), back_view, p, key);
          cuda::dropout_backward(gx.view, gx.view, p, key);
          check_identical("dropout_backward in place", download(gx.view), rounded(back_ref, dtype));
        }
}

TEST_CASE("cuda dropout_forward_positive_bits: dropout_forward's output and the CPU's bits",
          "[cuda][elementwise][dropout]") {
  // x of both signs with zeros among them (relu-like), so y > 0 is neither x != 0 nor the keep
  // mask; sizes that end inside a byte and inside a word; the words start poisoned, so a byte
  // past the last element left unzeroed shows.
  const RngKey key{20240618, 12, 9};
  for (DType dtype : kFloatTypes)
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{9}, int64_t{33}, int64_t{1000}, int64_t{4097},
                      int64_t{8192 * 2048 / 1024}})
      for (float p : {0.0f, 0.1f, 0.5f})
        for (int offset : {0, 1}) {
          INFO("dtype " << dtype_name(dtype) << " n " << n << " p " << p << " offset " << offset);
          const std::vector<int64_t> shape{n};
          std::vector<float> x = rounded(random_floats(n, 31 + n), dtype);
          for (int64_t i = 0; i < n; i += 5) x[i] = 0.0f;
          const int64_t words = dropout_keep_bits_words(1, n);
          std::vector<float> ref(n);
          std::vector<int32_t> ref_bits(words, -1);
          Tensor ref_view = cpu_view(ref, shape), ref_bits_view = cpu_view_i32(ref_bits, {words});
          dropout_forward_positive_bits(cpu_view(x, shape), ref_view, p, key, ref_bits_view);
          for (int64_t e = 0; e < n; ++e)
            REQUIRE(((ref_bits[e / 32] >> (e % 32)) & 1) == (ref[e] > 0.0f ? 1 : 0));

          GpuTensor gx = upload(x, shape, dtype, offset), gy = gpu_poisoned(shape, dtype, offset);
          GpuTensor plain = gpu_poisoned(shape, dtype, offset);
          GpuTensor bits = gpu_poisoned({words}, DType::i32);
          cuda::dropout_forward_positive_bits(gx.view, gy.view, p, key, bits.view);
          cuda::dropout_forward(gx.view, plain.view, p, key);
          const std::vector<float> got = download(gy.view);
          check_identical("y against dropout_forward", got, download(plain.view));
          check_identical("y against the CPU", got, rounded(ref, dtype));
          std::vector<int32_t> expected(words, 0);  // from the GPU's own y, rounded to T
          for (int64_t e = 0; e < n; ++e)
            if (got[e] > 0.0f) expected[e / 32] |= static_cast<int32_t>(1u << (e % 32));
          CHECK(download_i32(bits.view) == expected);
          // In place (y over x), as the feed-forward block runs it.
          cuda::dropout_forward_positive_bits(gx.view, gx.view, p, key, bits.view);
          check_identical("y over x", download(gx.view), got);
          CHECK(download_i32(bits.view) == expected);
        }
}

TEST_CASE("cuda dropout_residual_add equals dropout then residual_add, CPU and GPU",
          "[cuda][elementwise][dropout]") {
  const RngKey key{20240612, 91, 6};
  for (DType dtype : kFloatTypes)
    for (int64_t n : kSizes)
      for (float p : {0.0f, 0.1f, 0.5f})
        for (int offset : {0, 1}) {
          INFO("dtype " << dtype_name(dtype) << " n " << n << " p " << p << " offset " << offset);
          const std::vector<int64_t> shape{n};
          std::vector<float> a = rounded(random_floats(n, 31 + n), dtype);
          std::vector<float> b = rounded(nonzero_values(n, 32 + n), dtype);
          // The CPU reference with the 16-bit rounding of the two ops: the dropped-out b is
          // stored in the dtype, then the sum.
          std::vector<float> dropped(n), expected(n);
          Tensor dropped_view = cpu_view(dropped, shape), expected_view = cpu_view(expected, shape);
          dropout_forward(cpu_view(b, shape), dropped_view, p, key);
          dropped = rounded(dropped, dtype);  // a new buffer: view it again
          residual_add(cpu_view(a, shape), cpu_view(dropped, shape), expected_view);
          expected = rounded(expected, dtype);

          GpuTensor ga = upload(a, shape, dtype, offset), gb = upload(b, shape, dtype, offset);
          GpuTensor gy = gpu_poisoned(shape, dtype, offset);
          cuda::dropout_residual_add(ga.view, gb.view, gy.view, p, key);
          check_identical("dropout_residual_add", download(gy.view), expected);
          // The two GPU ops it replaces give the same bits.
          GpuTensor gb2 = upload(b, shape, dtype, offset), gy2 = gpu_poisoned(shape, dtype, offset);
          cuda::dropout_forward(gb2.view, gb2.view, p, key);
          cuda::residual_add(ga.view, gb2.view, gy2.view);
          check_identical("dropout_forward + residual_add", download(gy2.view), expected);
          // In place over a, then over b.
          cuda::dropout_residual_add(ga.view, gb.view, ga.view, p, key);
          check_identical("dropout_residual_add over a", download(ga.view), expected);
          ga = upload(a, shape, dtype, offset);
          cuda::dropout_residual_add(ga.view, gb.view, gb.view, p, key);
          check_identical("dropout_residual_add over b", download(gb.view), expected);
        }
}

TEST_CASE("cuda relu_dropout_backward equals dropout_backward then relu_backward",
          "[cuda][elementwise][dropout]") {
  const RngKey key{20240613, 5, 12};
  for (DType dtype : kFloatTypes)
    for (int64_t n : kSizes)
      for (float p : {0.0f, 0.1f, 0.5f})
        for (int offset : {0, 1}) {
          INFO("dtype " << dtype_name(dtype) << " n " << n << " p " << p << " offset " << offset);
          const std::vector<int64_t> shape{n};
          // y = dropout(relu(z)) as the feed-forward block stores it, in the dtype.
          std::vector<float> y = rounded(random_floats(n, 41 + n), dtype);
          Tensor y_cpu = cpu_view(y, shape);
          relu_forward(y_cpu, y_cpu);
          dropout_forward(y_cpu, y_cpu, p, key);
          y = rounded(y, dtype);
          std::vector<float> dy = rounded(random_floats(n, 42 + n), dtype), expected(n);
          Tensor expected_view = cpu_view(expected, shape);
          relu_dropout_backward(cpu_view(dy, shape), cpu_view(y, shape), expected_view, p);
          expected = rounded(expected, dtype);

          GpuTensor gdy = upload(dy, shape, dtype, offset), gy = upload(y, shape, dtype, offset);
          GpuTensor gdx = gpu_poisoned(shape, dtype, offset);
          cuda::relu_dropout_backward(gdy.view, gy.view, gdx.view, p);
          check_identical("relu_dropout_backward", download(gdx.view), expected);
          // The two GPU ops it replaces, in place as the block ran them.
          GpuTensor gdy2 = upload(dy, shape, dtype, offset);
          cuda::dropout_backward(gdy2.view, gdy2.view, p, key);
          cuda::relu_backward(gdy2.view, gy.view, gdy2.view);
          check_identical("dropout_backward + relu_backward", download(gdy2.view), expected);
          cuda::relu_dropout_backward(gdy.view, gy.view, gdy.view, p);  // dx over dy
          check_identical("relu_dropout_backward in place", download(gdy.view), expected);
        }
}

TEST_CASE("cuda fill_zero and copy_tensor", "[cuda][elementwise]") {
  for (DType dtype : {DType::f32, DType::bf16, DType::i32}) {
    const std::vector<int64_t> shape{3, 37};
    GpuTensor g = gpu_poisoned(shape, dtype);
    cuda::fill_zero(g.view);
    check_identical("fill_zero", download(g.view), std::vector<float>(3 * 37, 0.0f));
  }
  std::vector<float> values = random_floats(1001, 5);
  const std::vector<int64_t> shape{1001};
  GpuTensor src = upload(values, shape, DType::f32);
  GpuTensor dst = gpu_poisoned(shape, DType::f32, 1);
  cuda::copy_tensor(src.view, dst.view);
  check_identical("copy_tensor device to device", download(dst.view), values);
  std::vector<float> host(1001, -1.0f);
  Tensor host_view = cpu_view(host, shape);
  cuda::copy_tensor(dst.view, host_view);  // returns with the copy complete
  check_identical("copy_tensor device to host", host, values);
  GpuTensor back = gpu_poisoned(shape, DType::f32);
  cuda::copy_tensor(host_view, back.view);
  check_identical("copy_tensor host to device", download(back.view), values);
}

}  // namespace nmt::test

namespace nmt::test {

TEST_CASE("cuda convert_tensor equals the host conversions bit for bit", "[cuda][elementwise]") {
  // Ties, subnormals, overflow to infinity and ordinary values.
  std::vector<float> values = {0.0f,         -0.0f,    1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 0x1p-24f,
                               3 * 0x1p-25f, 65519.0f, 65520.0f,       -70000.0f,          1e-30f};
  std::vector<float> more = random_floats(1001, 77, -50.0f, 50.0f);
  values.insert(values.end(), more.begin(), more.end());
  const int64_t n = static_cast<int64_t>(values.size());
  GpuTensor src = upload(values, {n}, DType::f32);
  for (DType dtype : {DType::bf16, DType::f16}) {
    INFO("dtype " << dtype_name(dtype));
    GpuTensor half = gpu_poisoned({n}, dtype), back = gpu_poisoned({n}, DType::f32);
    convert_tensor(src.view, half.view);
    convert_tensor(half.view, back.view);
    std::vector<float> got = download(back.view);
    for (int64_t i = 0; i < n; ++i) {
      float expected = dtype == DType::bf16 ? bf16_to_float(float_to_bf16(values[i]))
                                            : f16_to_float(float_to_f16(values[i]));
      INFO("value " << values[i]);
      CHECK(got[i] == expected);
    }
  }
}

}  // namespace nmt::test
