// CUDA column sums (kernels/cuda/reduce.h, the bias gradients' db += column sums of dy) against the
// CPU reference at odd shapes, f32 / bf16 / f16, on 16-byte aligned and unaligned views (the
// vector and scalar paths, one part and many): accumulating into a nonzero out, the same bits on
// every run, back-to-back calls of other shapes (each tile's counter is left at zero), and replays
// of a captured CUDA graph.
#include <cuda_runtime.h>

#include <vector>

#include "kernels/cuda/graph.h"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/stream.h"
#include "test/cuda/gpu_test_util.h"
#include "test/support/catch.h"

namespace nmt::test {
namespace {

// out_init + `times` x the column sums of matrix [rows, cols]. Double: the reference. Float: the
// CPU op (kernels/cpu/linear.cpp's db), rows in order in f32, then added to out.
template <typename Acc>
std::vector<float> column_sums(const std::vector<float>& matrix, int64_t rows, int64_t cols,
                               const std::vector<float>& out_init, int times = 1) {
  std::vector<Acc> sums(cols, Acc{0});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) sums[c] += matrix[r * cols + c];
  std::vector<float> out = out_init;
  for (int64_t c = 0; c < cols; ++c)
    for (int i = 0; i < times; ++i) out[c] = static_cast<float>(out[c] + sums[c]);
  return out;
}

// One call on the current stream: out [cols] f32 += column sums of matrix [rows, cols].
void accumulate(const GpuTensor& matrix, const GpuTensor& out) {
  cuda::accumulate_column_sums(matrix.view, static_cast<float*>(out.view.data),
                               cuda::current_stream());
}

struct Shape {
  int64_t rows, cols;
};

// Checks one call on matrix [rows, cols] (shifted off 16-byte alignment by `offset` elements)
// against the CPU reference, out starting nonzero.
void check_against_cpu(DType dtype, Shape s, int offset) {
  INFO("dtype " << dtype_name(dtype) << " rows " << s.rows << " cols " << s.cols << " offset "
                << offset);
  const uint64_t seed = static_cast<uint64_t>(s.rows * 131 + s.cols * 7 + offset);
  const std::vector<float> values = random_floats(s.rows * s.cols, seed),
                           out_init = random_floats(s.cols, seed + 1);
  GpuTensor matrix = upload(values, {s.rows, s.cols}, dtype, offset);
  GpuTensor out = upload(out_init, {s.cols}, DType::f32);
  accumulate(matrix, out);
  check_close("column sums", dtype, download(out.view),
              column_sums<double>(values, s.rows, s.cols, out_init),
              column_sums<float>(rounded(values, dtype), s.rows, s.cols, out_init));
}

}  // namespace

TEST_CASE("cuda column sums match the CPU reference", "[cuda][reduce]") {
  // Rows: one part (up to 128 rows; fewer rows than the 32 lanes, unrolled or not) or several
  // (129: two; 8193: a last part of one row). Columns: the scalar path (1, 3, 13), the vector path
  // with one partial tile (8) and with a partial last tile (520, 2056), unless offset.
  const int64_t row_counts[] = {1, 7, 64, 65, 129, 8193};
  const int64_t col_counts[] = {1, 3, 8, 13, 520, 2056};
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
    for (int64_t rows : row_counts)
      for (int64_t cols : col_counts)
        for (int offset : {0, 1}) check_against_cpu(dtype, {rows, cols}, offset);
}

TEST_CASE("cuda column sums: capped part count, and more tiles than counters", "[cuda][reduce]") {
  // 40000 rows: over 256 parts of 128 rows, so parts grow to 157 rows (255 parts, the last one
  // short). 131105 odd columns: 4098 scalar tiles of 32, more than the 4096 counters, so two
  // launches; 130 rows give each tile two parts, so both launches use the counters.
  for (DType dtype : {DType::f32, DType::bf16}) {
    check_against_cpu(dtype, {40000, 72}, 0);
    check_against_cpu(dtype, {40000, 13}, 1);
    check_against_cpu(dtype, {130, 131105}, 0);
  }
}

TEST_CASE("cuda column sums: the same bits every run, +=, back-to-back shapes", "[cuda][reduce]") {
  // Queued back to back with no synchronisation between: a wide shape (many tiles), a narrow one,
  // the wide one again. A counter that a call left nonzero would keep the next call's last block
  // from being found, and that tile's sums from being added.
  const Shape wide{8193, 2056}, narrow{300, 520};
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
    for (int offset : {0, 1}) {
      INFO("dtype " << dtype_name(dtype) << " offset " << offset);
      const std::vector<float> wide_values = random_floats(wide.rows * wide.cols, 11),
                               narrow_values = random_floats(narrow.rows * narrow.cols, 12),
                               wide_init = random_floats(wide.cols, 13),
                               narrow_init = random_floats(narrow.cols, 14);
      GpuTensor wide_matrix = upload(wide_values, {wide.rows, wide.cols}, dtype, offset),
                narrow_matrix = upload(narrow_values, {narrow.rows, narrow.cols}, dtype, offset);
      GpuTensor first = upload(wide_init, {wide.cols}, DType::f32),
                second = upload(wide_init, {wide.cols}, DType::f32),
                twice = upload(wide_init, {wide.cols}, DType::f32),
                narrow_out = upload(narrow_init, {narrow.cols}, DType::f32);
      accumulate(wide_matrix, first);
      accumulate(narrow_matrix, narrow_out);
      accumulate(wide_matrix, second);
      accumulate(wide_matrix, twice);  // out += twice, as micro-batches accumulate
      accumulate(wide_matrix, twice);
      const std::vector<float> rounded_wide = rounded(wide_values, dtype);
      check_close("wide", dtype, download(first.view),
                  column_sums<double>(wide_values, wide.rows, wide.cols, wide_init),
                  column_sums<float>(rounded_wide, wide.rows, wide.cols, wide_init));
      check_close(
          "narrow after wide", dtype, download(narrow_out.view),
          column_sums<double>(narrow_values, narrow.rows, narrow.cols, narrow_init),
          column_sums<float>(rounded(narrow_values, dtype), narrow.rows, narrow.cols, narrow_init));
      check_identical("wide rerun", download(second.view), download(first.view));
      check_close("wide accumulated twice", dtype, download(twice.view),
                  column_sums<double>(wide_values, wide.rows, wide.cols, wide_init, 2),
                  column_sums<float>(rounded_wide, wide.rows, wide.cols, wide_init, 2));
    }
}

TEST_CASE("cuda column sums in a CUDA graph: every replay adds the sums, as an eager call does",
          "[cuda][reduce][graph]") {
  cuda::OwnedStream stream;
  cuda::StreamScope on_stream(stream.get());
  const Shape s{8193, 520};
  const std::vector<float> values = random_floats(s.rows * s.cols, 21),
                           out_init = random_floats(s.cols, 22);
  GpuTensor matrix = upload(values, {s.rows, s.cols}, DType::bf16);
  GpuTensor eager = upload(out_init, {s.cols}, DType::f32),
            replayed = upload(out_init, {s.cols}, DType::f32);
  // The uploads ran on the legacy stream, which the owned stream does not wait for.
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  // The eager calls first: they size the scratch and take the counters, so the capture allocates
  // nothing.
  for (int i = 0; i < 3; ++i) accumulate(matrix, eager);
  cuda::CapturedGraph graph =
      cuda::CapturedGraph::capture(stream.get(), [&] { accumulate(matrix, replayed); });
  for (int i = 0; i < 3; ++i) graph.launch(stream.get());
  REQUIRE(cudaStreamSynchronize(stream.get()) == cudaSuccess);
  check_identical("three replays against three eager calls", download(replayed.view),
                  download(eager.view));
  check_close("three replays", DType::bf16, download(replayed.view),
              column_sums<double>(values, s.rows, s.cols, out_init, 3),
              column_sums<float>(rounded(values, DType::bf16), s.rows, s.cols, out_init, 3));
}

}  // namespace nmt::test
