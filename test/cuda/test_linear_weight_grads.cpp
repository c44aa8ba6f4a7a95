// CUDA linear_weight_grads (one pointer-array cuBLASLt launch, or one product each off the 16-byte
// alignment) against the CPU reference's dW, accumulating onto what the gradients hold, at odd
// sizes, in f32, bf16 and f16, op by op and captured into a graph.
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/graph.h"
#include "kernels/cuda/stream.h"
#include "kernels/linear.h"
#include "test/cuda/gpu_test_util.h"
#include "test/support/catch.h"

namespace nmt::test {

TEST_CASE("cuda linear_weight_grads matches the CPU reference, batched or one by one",
          "[cuda][linear]") {
  const int64_t rows = 37, in = 24, out = 40;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
    for (int count : {2, 3})
      for (int offset : {0, 1})  // 1: x off the 16-byte alignment, one launch a product
        for (bool captured : {false, true}) {
          INFO(dtype_name(dtype) << ", " << count << " products, offset " << offset
                                 << (captured ? ", captured" : ""));
          std::vector<std::vector<float>> xs, dys, inits, refs, baselines;
          std::vector<GpuTensor> gx, gdy, gdw;
          for (int i = 0; i < count; ++i) {
            xs.push_back(random_floats(rows * in, 100 + 7 * i));
            dys.push_back(random_floats(rows * out, 200 + 7 * i));
            inits.push_back(random_floats(out * in, 300 + 7 * i));
            // The reference in f32 from the f32 inputs; the baseline from inputs rounded to dtype.
            refs.push_back(inits.back());
            baselines.push_back(inits.back());
            std::vector<float> w(out * in, 0.0f);
            Tensor none, ref = cpu_view(refs.back(), {out, in}),
                         base = cpu_view(baselines.back(), {out, in});
            linear_backward(cpu_view(dys[i], {rows, out}), cpu_view(xs[i], {rows, in}),
                            cpu_view(w, {out, in}), none, ref, none);
            std::vector<float> xr = rounded(xs[i], dtype), dyr = rounded(dys[i], dtype);
            linear_backward(cpu_view(dyr, {rows, out}), cpu_view(xr, {rows, in}),
                            cpu_view(w, {out, in}), none, base, none);
            gx.push_back(upload(xs[i], {rows, in}, dtype, offset));
            gdy.push_back(upload(dys[i], {rows, out}, dtype));
            gdw.push_back(upload(inits.back(), {out, in}, DType::f32));
          }
          std::vector<WeightGradProduct> products;
          for (int i = 0; i < count; ++i)
            products.push_back({gdy[i].view, gx[i].view, gdw[i].view});
          if (captured) {
            cuda::OwnedStream stream;
            // The first call outside the capture: the plan and the scratch exist before it.
            {
              cuda::StreamScope scope(stream.get());
              std::vector<GpuTensor> warm;
              std::vector<WeightGradProduct> warm_products;
              for (int i = 0; i < count; ++i) {
                warm.push_back(upload(inits[i], {out, in}, DType::f32));
                warm_products.push_back({gdy[i].view, gx[i].view, warm.back().view});
              }
              linear_weight_grads(warm_products);
              CUDA_CHECK(cudaStreamSynchronize(stream.get()));
            }
            const cuda::CapturedGraph graph =
                cuda::CapturedGraph::capture(stream.get(), [&] { linear_weight_grads(products); });
            graph.launch(stream.get());
            CUDA_CHECK(cudaStreamSynchronize(stream.get()));
          } else {
            linear_weight_grads(products);
          }
          for (int i = 0; i < count; ++i)
            check_close("dw " + std::to_string(i), dtype, download(gdw[i].view), refs[i],
                        baselines[i]);
        }
}

}  // namespace nmt::test
