// CUDA backward tails with a bias gradient (kernels/cuda/bias_grad_tails.h) against the unfused
// CUDA ops: dx bit for bit the dropout_backward / relu_dropout_backward output; db += the column
// sums of that stored dx, bit for bit what accumulate_column_sums adds after the unfused op, the
// same bits on a second call, and close to a double-precision sum on the host. f32 / bf16 / f16,
// odd shapes on the vector and scalar paths (16-byte aligned and not, columns that split Philox
// blocks across rows), one part and many (8193 rows), more column tiles than counters, dx over dy;
// the ReLU tail from y's positive bits (kernels/bias_grad_tails.h) against the unfused op on y.
#include <vector>

#include "kernels/cuda/bias_grad_tails.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/stream.h"
#include "test/cuda/gpu_test_util.h"
#include "test/support/catch.h"

namespace nmt::test {
namespace {

// relu_dropout_bits: relu_dropout_backward_bias given y > 0 as bits (made on the host here).
enum class Tail { dropout, relu_dropout, relu_dropout_bits };

const char* tail_name(Tail tail) {
  return tail == Tail::dropout        ? "dropout_backward_bias"
         : tail == Tail::relu_dropout ? "relu_dropout_backward_bias"
                                      : "relu_dropout_backward_bias from positive bits";
}

struct Shape {
  int64_t rows, cols;
};

// db_init + the column sums of matrix [rows, cols], rows added in order in Acc.
template <typename Acc>
std::vector<float> column_sums(const std::vector<float>& matrix, Shape s,
                               const std::vector<float>& db_init) {
  std::vector<Acc> sums(static_cast<size_t>(s.cols), Acc{0});
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t c = 0; c < s.cols; ++c) sums[c] += matrix[r * s.cols + c];
  std::vector<float> out = db_init;
  for (int64_t c = 0; c < s.cols; ++c) out[c] = static_cast<float>(out[c] + sums[c]);
  return out;
}

// bits: the words of y > 0 (Tail::relu_dropout_bits only).
void fused(Tail tail, const GpuTensor& dy, const GpuTensor& y, const GpuTensor& bits, GpuTensor& dx,
           float p, const RngKey& key, GpuTensor& db) {
  if (tail == Tail::dropout)
    cuda::dropout_backward_bias(dy.view, dx.view, p, key, db.view);
  else if (tail == Tail::relu_dropout)
    cuda::relu_dropout_backward_bias(dy.view, y.view, dx.view, p, db.view);
  else
    cuda::relu_dropout_backward_bias(dy.view, y.view, dx.view, p, db.view, bits.view);
}

GpuTensor positive_bits(const std::vector<float>& y) {
  const auto n = static_cast<int64_t>(y.size());
  std::vector<int32_t> words(static_cast<size_t>(dropout_keep_bits_words(1, n)), 0);
  for (int64_t e = 0; e < n; ++e)
    if (y[e] > 0.0f) words[e / 32] |= static_cast<int32_t>(1u << (e % 32));
  return upload_i32(words, {static_cast<int64_t>(words.size())});
}

void unfused(Tail tail, const GpuTensor& dy, const GpuTensor& y, GpuTensor& dx, float p,
             const RngKey& key, GpuTensor& db) {
  if (tail == Tail::dropout)
    cuda::dropout_backward(dy.view, dx.view, p, key);
  else
    cuda::relu_dropout_backward(dy.view, y.view, dx.view, p);
  cuda::accumulate_column_sums(dx.view, static_cast<float*>(db.view.data), cuda::current_stream());
}

// One shape: every matrix shifted off 16-byte alignment by `offset` elements (the same for all, so
// the fused op and accumulate_column_sums take the same path), db starting nonzero.
void check_tail(Tail tail, DType dtype, Shape s, float p, int offset) {
  INFO(tail_name(tail) << " dtype " << dtype_name(dtype) << " rows " << s.rows << " cols " << s.cols
                       << " p " << p << " offset " << offset);
  const RngKey key{20240617, 9, 3};
  const auto n = static_cast<size_t>(s.rows * s.cols);
  const uint64_t seed = static_cast<uint64_t>(s.rows * 131 + s.cols * 7 + offset);
  const std::vector<int64_t> shape{s.rows, s.cols};
  // y: any sign (its mask is y > 0); the op reads it as stored, so no forward is needed here.
  const std::vector<float> dy = rounded(nonzero_values(n, seed), dtype),
                           y = rounded(random_floats(n, seed + 2), dtype),
                           db_init = random_floats(static_cast<size_t>(s.cols), seed + 3);
  GpuTensor gdy = upload(dy, shape, dtype, offset), gy = upload(y, shape, dtype, offset),
            bits = positive_bits(y);

  GpuTensor expected_dx = gpu_poisoned(shape, dtype, offset),
            expected_db = upload(db_init, {s.cols}, DType::f32);
  unfused(tail, gdy, gy, expected_dx, p, key, expected_db);
  GpuTensor dx = gpu_poisoned(shape, dtype, offset), db = upload(db_init, {s.cols}, DType::f32),
            db_again = upload(db_init, {s.cols}, DType::f32);
  fused(tail, gdy, gy, bits, dx, p, key, db);
  fused(tail, gdy, gy, bits, dx, p, key, db_again);

  const std::vector<float> stored_dx = download(dx.view), sums = download(db.view);
  check_identical("dx against the unfused op", stored_dx, download(expected_dx.view));
  check_identical("db against accumulate_column_sums of the unfused dx", sums,
                  download(expected_db.view));
  check_identical("db on a second call", download(db_again.view), sums);
  // The stored dx is exact in f32, so the sums differ from a double sum by f32 rounding only.
  check_close("db against the host", DType::f32, sums, column_sums<double>(stored_dx, s, db_init),
              column_sums<float>(stored_dx, s, db_init));

  GpuTensor in_place = upload(dy, shape, dtype, offset),
            db_in_place = upload(db_init, {s.cols}, DType::f32);
  fused(tail, in_place, gy, bits, in_place, p, key, db_in_place);
  check_identical("dx over dy", download(in_place.view), stored_dx);
  check_identical("db with dx over dy", download(db_in_place.view), sums);
}

}  // namespace

TEST_CASE("cuda bias-gradient tails equal the unfused op then accumulate_column_sums",
          "[cuda][bias_grad_tails]") {
  // Rows: one part (up to 128), two (130), many with a one-row last part (8193). Columns: the
  // scalar path (1, 3, 13; 12 with 16-bit types: whole Philox blocks of 4 but no 8-element packs),
  // the vector path with one partial tile (8) and a partial last tile (520), unless offset.
  const int64_t row_counts[] = {1, 7, 130, 8193};
  const int64_t col_counts[] = {1, 3, 8, 12, 13, 520};
  for (Tail tail : {Tail::dropout, Tail::relu_dropout, Tail::relu_dropout_bits})
    for (DType dtype : {DType::f32, DType::bf16, DType::f16})
      for (int64_t rows : row_counts)
        for (int64_t cols : col_counts)
          for (float p : {0.0f, 0.3f})
            for (int offset : {0, 1}) check_tail(tail, dtype, {rows, cols}, p, offset);
}

TEST_CASE("cuda bias-gradient tails: more column tiles than counters, Transformer-base widths",
          "[cuda][bias_grad_tails]") {
  // 131105 odd columns: 4098 scalar tiles of 32, more than the 4096 counters, so two launches,
  // each with two parts of the 130 rows. 512 and 2048: the engine's d_model and ffn_dim.
  for (Tail tail : {Tail::dropout, Tail::relu_dropout, Tail::relu_dropout_bits}) {
    check_tail(tail, DType::bf16, {130, 131105}, 0.3f, 0);
    check_tail(tail, DType::bf16, {8192, 512}, 0.1f, 0);
    check_tail(tail, DType::bf16, {8192, 2048}, 0.1f, 0);
  }
}

}  // namespace nmt::test
