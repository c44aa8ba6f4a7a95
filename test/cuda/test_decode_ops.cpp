// CUDA incremental-decoding ops with the position of each row read from device memory: the
// embedding at each row's position is the GPU embedding_forward's row at that position bit for bit
// (and the CPU reference's within float rounding); the cache write copies each row to its own
// position exactly as the CPU reference does, on every word width the layout allows (aligned and
// unaligned views, odd widths), and leaves a row whose position is outside the cache unwritten.
#include <vector>

#include "kernels/cuda/decode_ops.h"
#include "kernels/cuda/embedding.h"
#include "kernels/decode_ops.h"
#include "kernels/embedding.h"
#include "test/cuda/gpu_test_util.h"
#include "test/support/catch.h"

namespace nmt::test {
namespace {

constexpr int32_t kPad = 0;

// Row r's position: distinct per row, not in order.
std::vector<int32_t> scattered_positions(int64_t rows, int64_t length) {
  std::vector<int32_t> positions(rows);
  for (int64_t r = 0; r < rows; ++r) positions[r] = static_cast<int32_t>((5 * r + 3) % length);
  return positions;
}

}  // namespace

TEST_CASE("cuda embedding_forward_at: embedding_forward's row at each row's position",
          "[cuda][decode]") {
  const float scale = 4.9f;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
    for (int64_t d : {7, 24, 513})
      for (int64_t rows : {1, 3, 7}) {
        INFO("dtype " << dtype_name(dtype) << " d " << d << " rows " << rows);
        const int64_t vocab = 11, length = 9;
        const std::vector<float> table = random_floats(vocab * d, 17 + d, -0.3f, 0.3f);
        const std::vector<int32_t> positions = scattered_positions(rows, length);
        std::vector<int32_t> ids(rows);
        for (int64_t r = 0; r < rows; ++r) ids[r] = r == 1 ? kPad : static_cast<int32_t>(1 + r);
        // Sentence r of the full batch holds ids[r] at positions[r] (pads elsewhere).
        std::vector<int32_t> sentences(rows * length, kPad);
        for (int64_t r = 0; r < rows; ++r) sentences[r * length + positions[r]] = ids[r];

        GpuTensor gtable = upload(table, {vocab, d}, dtype);
        GpuTensor gids = upload_i32(ids, {rows});
        GpuTensor gpositions = upload_i32(positions, {rows});
        GpuTensor gsentences = upload_i32(sentences, {rows * length});
        GpuTensor at = gpu_poisoned({rows, d}, dtype);
        GpuTensor full = gpu_poisoned({rows * length, d}, dtype);
        embedding_forward_at(gids.view, gpositions.view, gtable.view, at.view, scale, kPad);
        cuda::embedding_forward(gsentences.view, gtable.view, full.view, length, scale, kPad);
        const std::vector<float> got = download(at.view), whole = download(full.view);
        std::vector<float> want(rows * d);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < d; ++j)
            want[r * d + j] = whole[(r * length + positions[r]) * d + j];
        check_identical("row at its position", got, want);

        // The CPU reference on the same (rounded) table.
        std::vector<float> cpu_table = rounded(table, dtype), cpu_out(rows * d);
        std::vector<int32_t> cpu_ids = ids, cpu_positions = positions;
        Tensor cpu_out_view = cpu_view(cpu_out, {rows, d});
        embedding_forward_at(cpu_view_i32(cpu_ids, {rows}), cpu_view_i32(cpu_positions, {rows}),
                             cpu_view(cpu_table, {vocab, d}), cpu_out_view, scale, kPad);
        check_close("against the CPU", dtype, got, cpu_out, rounded(cpu_out, dtype));
      }
}

TEST_CASE("cuda cache_write_position: each row at its own position, every word width",
          "[cuda][decode]") {
  const int64_t length = 6;
  // bf16 widths of 8 (16-byte words), 2 (4-byte words) and 3 (2-byte words); offset views break
  // the alignment the wide words need.
  for (DType dtype : {DType::f32, DType::bf16})
    for (int64_t width : {8, 2, 3})
      for (int offset : {0, 1})
        for (int64_t rows : {1, 3, 7}) {
          INFO("dtype " << dtype_name(dtype) << " width " << width << " offset " << offset
                        << " rows " << rows);
          const std::vector<float> x = rounded(random_floats(rows * width, 5 + rows), dtype);
          std::vector<float> cache = rounded(random_floats(rows * length * width, 9), dtype);
          std::vector<int32_t> positions = scattered_positions(rows, length);
          GpuTensor gx = upload(x, {rows, width}, dtype, offset);
          GpuTensor gcache = upload(cache, {rows, length, width}, dtype, offset);
          GpuTensor gpositions = upload_i32(positions, {rows});
          cache_write_position(gx.view, gpositions.view, gcache.view);
          std::vector<float> cpu_x = x;
          Tensor cpu_cache = cpu_view(cache, {rows, length, width});
          cache_write_position(cpu_view(cpu_x, {rows, width}), cpu_view_i32(positions, {rows}),
                               cpu_cache);
          check_identical("cache", download(gcache.view), cache);
        }
}

TEST_CASE("cuda cache_write_position: a position outside the cache leaves its row unwritten",
          "[cuda][decode]") {
  const int64_t rows = 3, length = 4, width = 8;
  const std::vector<float> x = random_floats(rows * width, 3);
  const std::vector<float> cache = random_floats(rows * length * width, 4);
  GpuTensor gx = upload(x, {rows, width}, DType::f32);
  GpuTensor gcache = upload(cache, {rows, length, width}, DType::f32);
  GpuTensor gpositions = upload_i32({1, static_cast<int32_t>(length), -1}, {rows});
  cache_write_position(gx.view, gpositions.view, gcache.view);
  std::vector<float> want = cache;
  for (int64_t c = 0; c < width; ++c) want[(0 * length + 1) * width + c] = x[c];
  check_identical("cache", download(gcache.view), want);
}

}  // namespace nmt::test
