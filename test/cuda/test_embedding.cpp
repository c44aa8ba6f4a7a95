// CUDA token embedding against the CPU reference: scaled lookup plus sinusoid, pad rows zero, and
// a deterministic accumulating backward, including ids whose rows span many sort chunks.
#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>

#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embedding.h"
#include "kernels/embedding.h"
#include "test/cuda/gpu_test_util.h"
#include "test/support/catch.h"

namespace nmt::test {
namespace {

constexpr int32_t kPad = 0;

std::vector<int32_t> random_ids(int64_t rows, int64_t vocab, uint64_t seed) {
  const std::vector<float> picks = random_floats(rows, seed, 0.0f, 1.0f);
  std::vector<int32_t> ids(rows);
  for (int64_t r = 0; r < rows; ++r)
    ids[r] =
        static_cast<int32_t>(std::min<int64_t>(vocab - 1, static_cast<int64_t>(picks[r] * vocab)));
  return ids;
}

}  // namespace

TEST_CASE("cuda embedding matches the CPU reference", "[cuda][embedding]") {
  struct Case {
    int64_t batch, seq_len, vocab, d_model;
  };
  // vocab 3 with 1000 rows: each id's rows span many chunks of the backward's segmented sum.
  const Case cases[] = {{1, 1, 5, 1},    {3, 7, 5, 7},       {20, 33, 1000, 64},
                        {4, 25, 3, 513}, {8, 64, 1000, 512}, {40, 25, 3, 8}};
  const float scale = 22.627f;  // sqrt(512)
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
    for (const Case& c : cases) {
      const int64_t rows = c.batch * c.seq_len, vocab = c.vocab, d = c.d_model;
      INFO("dtype " << dtype_name(dtype) << " rows " << rows << " vocab " << vocab << " d " << d);
      const uint64_t seed = static_cast<uint64_t>(rows * 13 + vocab * 7 + d);
      std::vector<int32_t> ids = random_ids(rows, vocab, seed);
      std::vector<float> table = random_floats(vocab * d, seed + 1, -0.1f, 0.1f);
      std::vector<float> d_out = random_floats(rows * d, seed + 2);
      std::vector<float> grad_init = random_floats(vocab * d, seed + 3);

      auto cpu_forward = [&](std::vector<float> t) {
        std::vector<float> out(rows * d);
        Tensor out_view = cpu_view(out, {rows, d});
        embedding_forward(cpu_view_i32(ids, {rows}), cpu_view(t, {vocab, d}), out_view, c.seq_len,
                          scale, kPad);
        return out;
      };
      auto cpu_backward = [&](std::vector<float> g) {
        std::vector<float> grad = grad_init;
        Tensor grad_view = cpu_view(grad, {vocab, d});
        embedding_backward(cpu_view_i32(ids, {rows}), cpu_view(g, {rows, d}), grad_view, scale,
                           kPad);
        return grad;
      };
      const std::vector<float> ref_out = cpu_forward(table);
      const std::vector<float> base_out = rounded(cpu_forward(rounded(table, dtype)), dtype);

      GpuTensor gids = upload_i32(ids, {rows});
      GpuTensor gtable = upload(table, {vocab, d}, dtype);
      GpuTensor gout = gpu_poisoned({rows, d}, dtype);
      cuda::embedding_forward(gids.view, gtable.view, gout.view, c.seq_len, scale, kPad);
      check_close("out", dtype, download(gout.view), ref_out, base_out);

      const std::vector<float> ref_grad = cpu_backward(d_out);
      const std::vector<float> base_grad = cpu_backward(rounded(d_out, dtype));
      GpuTensor gdout = upload(d_out, {rows, d}, dtype);
      GpuTensor ggrad = upload(grad_init, {vocab, d}, DType::f32);
      cuda::embedding_backward(gids.view, gdout.view, ggrad.view, scale, kPad);
      const std::vector<float> grad = download(ggrad.view);
      check_close("d_table", dtype, grad, ref_grad, base_grad);
      GpuTensor ggrad2 = upload(grad_init, {vocab, d}, DType::f32);
      cuda::embedding_backward(gids.view, gdout.view, ggrad2.view, scale, kPad);
      check_identical("d_table rerun", download(ggrad2.view), grad);
    }
}

// The fused dropout and the caller's row order change nothing: the forward equals embedding_forward
// then dropout_forward, and the backward dropout_backward (into a copy) then embedding_backward,
// bit for bit, with or without the order, in every dtype,
// at widths the packed kernels take (multiples of the pack, aligned) and the one-element kernels
// take (odd widths, or tensors one element off their alignment).
TEST_CASE("cuda embedding's fused dropout and a caller's row order equal the separate ops",
          "[cuda][embedding]") {
  struct Case {
    int64_t batch, seq_len, vocab, d_model;
    int offset;  // elements the activations and gradients sit off their alignment
  };
  const Case cases[] = {{3, 7, 5, 7, 0},       {20, 33, 1000, 64, 0}, {4, 25, 3, 513, 0},
                        {8, 64, 1000, 512, 0}, {8, 64, 1000, 512, 1}, {40, 25, 3, 8, 0}};
  const float scale = 22.627f, p = 0.1f;
  const EmbeddingDropout dropout{p, RngKey{9, 4, 2}};
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    // The packed kernels' results at offset 0, which the one-element kernels must equal at 1.
    std::vector<float> packed_out, packed_grad;
    for (const Case& c : cases) {
      const int64_t rows = c.batch * c.seq_len, vocab = c.vocab, d = c.d_model;
      INFO("dtype " << dtype_name(dtype) << " rows " << rows << " vocab " << vocab << " d " << d
                    << " offset " << c.offset);
      const uint64_t seed = static_cast<uint64_t>(rows * 5 + vocab * 3 + d);
      std::vector<int32_t> ids = random_ids(rows, vocab, seed);
      ids[0] = kPad;
      const std::vector<float> table = random_floats(vocab * d, seed + 1, -0.1f, 0.1f);
      const std::vector<float> d_out = random_floats(rows * d, seed + 2);
      const std::vector<float> grad_init = random_floats(vocab * d, seed + 3);
      GpuTensor gids = upload_i32(ids, {rows});
      GpuTensor gtable = upload(table, {vocab, d}, dtype);

      GpuTensor fused = gpu_poisoned({rows, d}, dtype, c.offset);
      cuda::embedding_forward(gids.view, gtable.view, fused.view, c.seq_len, scale, kPad, dropout);
      GpuTensor separate = gpu_poisoned({rows, d}, dtype, c.offset);
      cuda::embedding_forward(gids.view, gtable.view, separate.view, c.seq_len, scale, kPad);
      cuda::dropout_forward(separate.view, separate.view, p, dropout.key);
      const std::vector<float> out = download(fused.view);
      check_identical("dropped-out embedding", out, download(separate.view));
      int zeros = 0;
      for (float v : out) zeros += v == 0.0f ? 1 : 0;
      CHECK(zeros > d);  // more than the pad row: the mask dropped elements

      GpuTensor gdout = upload(d_out, {rows, d}, dtype, c.offset);
      const std::vector<float> d_out_stored = download(gdout.view);
      GpuTensor grad_fused = upload(grad_init, {vocab, d}, DType::f32);
      cuda::embedding_backward(gids.view, gdout.view, grad_fused.view, scale, kPad, dropout);
      check_identical("d_out left as it was", download(gdout.view), d_out_stored);
      // The order as add_row_orders makes it: a stable sort by id, pad rows last with a key above
      // every id (here INT32_MAX).
      std::vector<int32_t> order_rows(ids.size());
      for (size_t r = 0; r < order_rows.size(); ++r) order_rows[r] = static_cast<int32_t>(r);
      const auto key = [&](int32_t r) { return ids[r] == kPad ? INT32_MAX : ids[r]; };
      std::stable_sort(order_rows.begin(), order_rows.end(),
                       [&](int32_t a, int32_t b) { return key(a) < key(b); });
      std::vector<int32_t> keys(ids.size());
      for (size_t i = 0; i < keys.size(); ++i) keys[i] = key(order_rows[i]);
      GpuTensor gkeys = upload_i32(keys, {rows}), grows = upload_i32(order_rows, {rows});
      const EmbeddingRowOrder order{gkeys.view, grows.view};
      GpuTensor grad_ordered = upload(grad_init, {vocab, d}, DType::f32);
      cuda::embedding_backward(gids.view, gdout.view, grad_ordered.view, scale, kPad, dropout,
                               &order);
      GpuTensor dropped = upload(d_out, {rows, d}, dtype, c.offset);
      cuda::dropout_backward(dropped.view, dropped.view, p, dropout.key);
      GpuTensor grad_separate = upload(grad_init, {vocab, d}, DType::f32);
      cuda::embedding_backward(gids.view, dropped.view, grad_separate.view, scale, kPad);
      const std::vector<float> expected = download(grad_separate.view);
      check_identical("d_table, dropout fused", download(grad_fused.view), expected);
      check_identical("d_table, the caller's order", download(grad_ordered.view), expected);
      if (d == 512 && c.offset == 0) packed_out = out, packed_grad = expected;
      if (d == 512 && c.offset == 1) {
        check_identical("one-element against packed forward", out, packed_out);
        check_identical("one-element against packed backward", expected, packed_grad);
      }
    }
  }
}

}  // namespace nmt::test
