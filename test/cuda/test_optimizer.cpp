// CUDA gradient sum of squares, the clip record and Adam / LazyAdam against the CPU reference.
#include <cmath>
#include <vector>

#include "kernels/cuda/optimizer.h"
#include "kernels/optimizer.h"
#include "test/cuda/gpu_test_util.h"
#include "test/support/catch.h"

namespace nmt::test {

TEST_CASE("cuda sum_of_squares matches the CPU", "[cuda][optimizer]") {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{1000003}})
      for (int offset : {0, 1}) {
        INFO("dtype " << dtype_name(dtype) << " n " << n << " offset " << offset);
        std::vector<float> x = rounded(random_floats(n, 40 + n, -3.0f, 3.0f), dtype);
        const double ref = sum_of_squares(cpu_view(x, {n}));
        GpuTensor gx = upload(x, {n}, dtype, offset);
        const double got = cuda::sum_of_squares(gx.view);
        CHECK(std::fabs(got - ref) <= 1e-6 * ref + 1e-12);
      }
}

TEST_CASE("cuda adam_update matches the CPU over several steps", "[cuda][optimizer]") {
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1001}, int64_t{100003}}) {
    INFO("n " << n);
    std::vector<float> param = random_floats(n, 50 + n), m(n, 0.0f), v(n, 0.0f);
    GpuTensor gp = upload(param, {n}, DType::f32), gm = upload(m, {n}, DType::f32),
              gv = upload(v, {n}, DType::f32);
    AdamHyper h;
    h.lr = 2e-3f;
    h.beta1 = 0.9f;
    h.beta2 = 0.98f;
    h.eps = 1e-9f;
    h.weight_decay = 0.01f;
    for (int64_t step = 1; step <= 3; ++step) {
      h.step = step;
      std::vector<float> grad = random_floats(n, 60 + n * step, -0.1f, 0.1f);
      Tensor p_view = cpu_view(param, {n}), m_view = cpu_view(m, {n}), v_view = cpu_view(v, {n});
      adam_update(p_view, cpu_view(grad, {n}), m_view, v_view, h, 0.5f);
      GpuTensor gg = upload(grad, {n}, DType::f32);
      cuda::adam_update(gp.view, gg.view, gm.view, gv.view, h, 0.5f);
    }
    check_close("param", DType::f32, download(gp.view), param, param, 2.0, 1e-6);
    check_close("m", DType::f32, download(gm.view), m, m, 2.0, 1e-6);
    check_close("v", DType::f32, download(gv.view), v, v, 2.0, 1e-6);
  }
}

TEST_CASE("cuda lazy_adam_update skips untouched rows", "[cuda][optimizer]") {
  for (int64_t cols : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{100}}) {
    const int64_t rows = 50, n = rows * cols;
    INFO("cols " << cols);
    std::vector<float> param = random_floats(n, 70 + cols), m = random_floats(n, 71, 0.0f, 0.01f),
                       v = random_floats(n, 72, 0.0f, 0.001f);
    std::vector<float> grad = random_floats(n, 73 + cols, -0.1f, 0.1f);
    for (int64_t r = 0; r < rows; r += 3)
      for (int64_t c = 0; c < cols; ++c) grad[r * cols + c] = 0.0f;  // untouched rows
    const std::vector<float> param_before = param;
    GpuTensor gp = upload(param, {rows, cols}, DType::f32),
              gm = upload(m, {rows, cols}, DType::f32), gv = upload(v, {rows, cols}, DType::f32),
              gg = upload(grad, {rows, cols}, DType::f32);
    AdamHyper h;
    h.step = 7;
    Tensor p_view = cpu_view(param, {rows, cols}), m_view = cpu_view(m, {rows, cols}),
           v_view = cpu_view(v, {rows, cols});
    lazy_adam_update(p_view, cpu_view(grad, {rows, cols}), m_view, v_view, h, 2.0f);
    cuda::lazy_adam_update(gp.view, gg.view, gm.view, gv.view, h, 2.0f);
    const std::vector<float> got = download(gp.view);
    check_close("param", DType::f32, got, param, param, 2.0, 1e-6);
    check_close("m", DType::f32, download(gm.view), m, m, 2.0, 1e-6);
    check_close("v", DType::f32, download(gv.view), v, v, 2.0, 1e-6);
    for (int64_t r = 0; r < rows; r += 3)
      for (int64_t c = 0; c < cols; ++c) CHECK(got[r * cols + c] == param_before[r * cols + c]);
  }
}

TEST_CASE("cuda adam and lazy adam write the working copy in the same pass", "[cuda][optimizer]") {
  for (DType dtype : {DType::bf16, DType::f16})
    for (bool lazy : {false, true}) {
      INFO("dtype " << dtype_name(dtype) << " lazy " << lazy);
      const int64_t rows = 37, cols = lazy ? 36 : 35, n = rows * cols;
      std::vector<float> param = random_floats(n, 70), zeros(n, 0.0f);
      std::vector<float> grad = random_floats(n, 71, -0.1f, 0.1f);
      for (int64_t c = 0; c < cols; ++c) grad[5 * cols + c] = 0.0f;  // row 5 untouched when lazy
      GpuTensor gp = upload(param, {rows, cols}, DType::f32),
                gg = upload(grad, {rows, cols}, DType::f32),
                gm = upload(zeros, {rows, cols}, DType::f32),
                gv = upload(zeros, {rows, cols}, DType::f32);
      GpuTensor work = upload(param, {rows, cols}, dtype);  // the working copy before the step
      std::vector<float> before = download(work.view);
      AdamHyper h;
      h.lr = 1e-2f;
      if (lazy)
        cuda::lazy_adam_update(gp.view, gg.view, gm.view, gv.view, h, 1.0f, &work.view);
      else
        cuda::adam_update(gp.view, gg.view, gm.view, gv.view, h, 1.0f, &work.view);
      std::vector<float> updated = download(gp.view), copy = download(work.view);
      for (int64_t i = 0; i < n; ++i) {
        INFO("element " << i);
        REQUIRE(copy[i] == round_to(updated[i], dtype));
        if (lazy && i / cols == 5) REQUIRE(copy[i] == before[i]);
      }
    }
}

TEST_CASE("cuda grad_clip_into gives the CPU's record bit for bit", "[cuda][optimizer]") {
  for (DType dtype : {DType::f32, DType::bf16})
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000003}})
      for (float max_norm : {0.0f, 1.0f, 1e4f}) {
        INFO("dtype " << dtype_name(dtype) << " n " << n << " max_norm " << max_norm);
        std::vector<float> x = rounded(random_floats(n, 80 + n, -3.0f, 3.0f), dtype);
        // The CPU record from the GPU's own sum (the two sums differ in their last bits).
        GpuTensor gx = upload(x, {n}, dtype);
        const GradClip expected = grad_clip_of(cuda::sum_of_squares(gx.view), 3.5, max_norm);
        GpuTensor record = upload_i32(std::vector<int32_t>(kGradClipWords, -1), {kGradClipWords});
        cuda::grad_clip_into(gx.view, 3.5, max_norm, record.view);
        const GradClip got = cuda::read_grad_clip(record.view);
        CHECK(got.grad_norm == expected.grad_norm);
        CHECK(got.scale == expected.scale);
        CHECK(got.skip == 0);
      }
  std::vector<float> x = random_floats(1001, 90);
  x[500] = INFINITY;
  GpuTensor gx = upload(x, {1001}, DType::f32);
  GpuTensor record = upload_i32(std::vector<int32_t>(kGradClipWords, 0), {kGradClipWords});
  cuda::grad_clip_into(gx.view, 1.0, 1.0f, record.view);
  CHECK(cuda::read_grad_clip(record.view).skip == 1);
}

TEST_CASE("cuda adam reads the clip record on the device, and skips when it says so",
          "[cuda][optimizer]") {
  for (bool lazy : {false, true}) {
    INFO("lazy " << lazy);
    const int64_t rows = 9, cols = 36, n = rows * cols;
    const std::vector<float> param = random_floats(n, 91), m = random_floats(n, 92, 0.0f, 0.01f),
                             v = random_floats(n, 93, 0.0f, 0.001f);
    std::vector<float> grad = random_floats(n, 94, -0.1f, 0.1f);
    AdamHyper h;
    h.step = 3;
    auto run = [&](const std::vector<float>& g, bool with_record) {
      GpuTensor gp = upload(param, {rows, cols}, DType::f32),
                gm = upload(m, {rows, cols}, DType::f32), gv = upload(v, {rows, cols}, DType::f32),
                gg = upload(g, {rows, cols}, DType::f32);
      GpuTensor work = upload(param, {rows, cols}, DType::bf16);
      GpuTensor record = upload_i32(std::vector<int32_t>(kGradClipWords, 0), {kGradClipWords});
      cuda::grad_clip_into(gg.view, 7.0, 0.05f, record.view);
      const GradScale scale =
          with_record ? GradScale(record.view) : GradScale(cuda::read_grad_clip(record.view).scale);
      if (lazy)
        cuda::lazy_adam_update(gp.view, gg.view, gm.view, gv.view, h, scale, &work.view);
      else
        cuda::adam_update(gp.view, gg.view, gm.view, gv.view, h, scale, &work.view);
      return std::vector<std::vector<float>>{download(gp.view), download(gm.view),
                                             download(gv.view), download(work.view)};
    };
    const auto by_host = run(grad, false), by_record = run(grad, true);
    for (size_t i = 0; i < by_host.size(); ++i) CHECK(by_record[i] == by_host[i]);
    CHECK(by_record[0] != param);
    grad[n / 2] = NAN;
    const auto skipped = run(grad, true);
    CHECK(skipped[0] == param);
    CHECK(skipped[1] == m);
    CHECK(skipped[2] == v);
    CHECK(skipped[3] == rounded(param, DType::bf16));
  }
}

}  // namespace nmt::test
