// The residual dropout's keep mask saved as bits (kernels/philox.h) on the GPU:
// - dropout_residual_layernorm_forward stores it on the register path of bf16 / f16 in 8-element
//   packs and returns true: every byte is the mask dropout_keep draws for its 8 elements (the byte
//   dropout_keep_bits<8> makes of the pack), bytes past rows * d / 8 are left alone, and sum, y,
//   mean and rstd are the bits of the call without keep_bits. It returns false and leaves keep_bits
//   alone for f32, widths off the packs (d % 8 != 0, d > 1024), unaligned tensors and p = 0.
// - layernorm_backward_dropout_bias, layernorm_backward_add_dropout_bias and dropout_backward_bias
//   given those bits: dx, d_gamma, d_beta, d_branch and d_branch_bias the bits of the same call
//   without them; given zeroed bits, d_branch is 0 and d_branch_bias its initial value (the kernels
//   read the bits, they do not draw).
// bf16 and f16; rows 1, 3, 257, 8193; widths 8, 512, 520 and 1024 (one, two and four packs a lane);
// p 0.1 and 0.3.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/bias_grad_tails.h"
#include "kernels/cuda/check.h"
#include "kernels/layernorm.h"
#include "test/cuda/gpu_test_util.h"
#include "test/kernels/kernel_test_util.h"
#include "test/support/catch.h"

namespace nmt::test {
namespace {

constexpr float kEps = 1e-5f;
const int64_t kRowCounts[] = {1, 3, 257, 8193};
const int64_t kWidths[] = {8, 512, 520, 1024};
const float kDropouts[] = {0.1f, 0.3f};
const DType kHalfDtypes[] = {DType::bf16, DType::f16};

// A keep-bits buffer for [rows, d], every byte 0xFF (so a byte the forward did not store shows).
GpuTensor poisoned_bits(int64_t rows, int64_t d) {
  return gpu_poisoned({dropout_keep_bits_words(rows, d)}, DType::i32);
}

std::vector<uint8_t> download_bytes(const Tensor& t) {
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> bytes(t.bytes());
  if (!bytes.empty())
    CUDA_CHECK(cudaMemcpy(bytes.data(), t.data, bytes.size(), cudaMemcpyDeviceToHost));
  return bytes;
}

// The mask's rows * d / 8 bytes as the format defines them: bit i of byte b keeps element 8b + i.
std::vector<uint8_t> host_mask(int64_t rows, int64_t d, float p, const RngKey& key) {
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * d / 8), 0);
  for (size_t b = 0; b < bytes.size(); ++b)
    for (int i = 0; i < 8; ++i)
      if (dropout_keep(key, 8 * b + i, p)) bytes[b] |= static_cast<uint8_t>(1u << i);
  return bytes;
}

// The first rows * d / 8 bytes of `got` equal `mask`; the rest of the last word is untouched.
void check_mask_bytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& mask) {
  REQUIRE(got.size() >= mask.size());
  size_t wrong = 0, first_wrong = 0, touched = 0;
  for (size_t b = 0; b < mask.size(); ++b)
    if (got[b] != mask[b] && wrong++ == 0) first_wrong = b;
  for (size_t b = mask.size(); b < got.size(); ++b) touched += got[b] != 0xFF;
  INFO(wrong << " of " << mask.size() << " mask bytes differ, the first at byte " << first_wrong
             << " (got " << int{got[first_wrong]} << ", expected " << int{mask[first_wrong]}
             << "); " << touched << " bytes past the mask written");
  CHECK(wrong == 0);
  CHECK(touched == 0);
}

bool untouched(const std::vector<uint8_t>& bytes) {
  for (uint8_t b : bytes)
    if (b != 0xFF) return false;
  return true;
}

// --- forward ---------------------------------------------------------------------------------

// The forward's inputs; `offset` shifts residual, branch, sum and y off 16-byte alignment when 1,
// and only the residual when 2 (the op then runs dropout_residual_add and layernorm_forward).
struct ForwardCase {
  int64_t rows, d;
  DType dtype;
  int offset = 0;
  GpuTensor residual, branch, gamma, beta;
  ForwardCase(int64_t rows_, int64_t d_, DType dtype_, int offset_ = 0)
      : rows(rows_), d(d_), dtype(dtype_), offset(offset_) {
    const auto n = static_cast<size_t>(rows * d);
    const uint64_t seed = static_cast<uint64_t>(rows * 31 + d);
    residual = upload(rounded(random_floats(n, seed, 1.0f, 3.0f), dtype), {rows, d}, dtype,
                      offset != 0 ? 1 : 0);
    branch =
        upload(rounded(nonzero_values(n, seed + 1), dtype), {rows, d}, dtype, offset == 1 ? 1 : 0);
    gamma = upload(rounded(random_floats(d, seed + 2, 0.5f, 1.5f), dtype), {d}, dtype);
    beta = upload(rounded(random_floats(d, seed + 3, -0.5f, 0.5f), dtype), {d}, dtype);
  }
  ForwardOutputs outputs() const { return ForwardOutputs(rows, d, dtype, offset == 1 ? 1 : 0); }
  bool run(ForwardOutputs& out, float p, const RngKey& key,
           const Tensor& keep_bits = Tensor()) const {
    return dropout_residual_layernorm_forward(residual.view, branch.view, out.sum.view, p, key,
                                              gamma.view, beta.view, out.y.view, out.mean.view,
                                              out.rstd.view, kEps, keep_bits);
  }
};

void check_same_forward(const ForwardOutputs& got, const ForwardOutputs& expected) {
  check_identical("sum", download(got.sum.view), download(expected.sum.view));
  check_identical("y", download(got.y.view), download(expected.y.view));
  check_identical("mean", download(got.mean.view), download(expected.mean.view));
  check_identical("rstd", download(got.rstd.view), download(expected.rstd.view));
}

// The forward without keep_bits, then with: it stores the mask and changes nothing else.
void check_forward_stores(DType dtype, int64_t rows, int64_t d, float p) {
  INFO("dtype " << dtype_name(dtype) << " rows " << rows << " d " << d << " p " << p);
  const ForwardCase in(rows, d, dtype);
  const RngKey key{20250201, 41, static_cast<uint32_t>(d + rows)};
  ForwardOutputs plain = in.outputs(), with_bits = in.outputs();
  CHECK_FALSE(in.run(plain, p, key));
  GpuTensor bits = poisoned_bits(rows, d);
  CHECK(in.run(with_bits, p, key, bits.view));
  check_same_forward(with_bits, plain);
  check_mask_bytes(download_bytes(bits.view), host_mask(rows, d, p, key));
}

// A call the op declines: returns false, keep_bits untouched, the other outputs those without it.
void check_forward_declines(const std::string& what, const ForwardCase& in, float p) {
  INFO(what << ": dtype " << dtype_name(in.dtype) << " rows " << in.rows << " d " << in.d
            << " offset " << in.offset << " p " << p);
  const RngKey key{20250202, 43, static_cast<uint32_t>(in.d)};
  ForwardOutputs plain = in.outputs(), with_bits = in.outputs();
  in.run(plain, p, key);
  GpuTensor bits = poisoned_bits(in.rows, in.d);
  CHECK_FALSE(in.run(with_bits, p, key, bits.view));
  CHECK(untouched(download_bytes(bits.view)));
  check_same_forward(with_bits, plain);
}

// --- backward --------------------------------------------------------------------------------

struct BackwardRun {
  GpuTensor dx, d_gamma, d_beta, d_branch, d_branch_bias;
  BackwardRun(int64_t rows, int64_t d, DType dtype, const std::vector<float>& grad_init)
      : dx(gpu_poisoned({rows, d}, dtype)),
        d_gamma(upload(grad_init, {d}, DType::f32)),
        d_beta(upload(grad_init, {d}, DType::f32)),
        d_branch(gpu_poisoned({rows, d}, dtype)),
        d_branch_bias(upload(grad_init, {d}, DType::f32)) {}
};

void check_same_backward(const BackwardRun& got, const BackwardRun& expected) {
  check_identical("dx", download(got.dx.view), download(expected.dx.view));
  check_identical("d_gamma", download(got.d_gamma.view), download(expected.d_gamma.view));
  check_identical("d_beta", download(got.d_beta.view), download(expected.d_beta.view));
  check_identical("d_branch", download(got.d_branch.view), download(expected.d_branch.view));
  check_identical("d_branch_bias", download(got.d_branch_bias.view),
                  download(expected.d_branch_bias.view));
}

// Zeroed bits drop every element: d_branch is 0 and d_branch_bias keeps its initial value.
void check_all_dropped(const std::vector<float>& d_branch, const std::vector<float>& d_branch_bias,
                       const std::vector<float>& grad_init) {
  size_t nonzero = 0, moved = 0;
  for (float v : d_branch) nonzero += v != 0.0f;
  for (size_t c = 0; c < grad_init.size(); ++c) moved += d_branch_bias[c] != grad_init[c];
  INFO(nonzero << " d_branch elements not 0, " << moved << " d_branch_bias columns moved");
  CHECK(nonzero == 0);
  CHECK(moved == 0);
}

enum class Tail { dropout_bias, add_dropout_bias };

// Both LayerNorm backward tails without the bits, with the forward's bits, and with zeroed bits.
void check_backward_reads(DType dtype, int64_t rows, int64_t d, float p) {
  INFO("dtype " << dtype_name(dtype) << " rows " << rows << " d " << d << " p " << p);
  const auto n = static_cast<size_t>(rows * d);
  const uint64_t seed = static_cast<uint64_t>(rows * 37 + d);
  const RngKey key{20250203, 47, static_cast<uint32_t>(d + rows)};
  // The bits as the sublayer's forward stores them.
  const ForwardCase forward(rows, d, dtype);
  ForwardOutputs forward_out = forward.outputs();
  GpuTensor bits = poisoned_bits(rows, d);
  REQUIRE(forward.run(forward_out, p, key, bits.view));

  const std::vector<int64_t> shape{rows, d};
  const GpuTensor x = upload(rounded(random_floats(n, seed, -2.0f, 3.0f), dtype), shape, dtype),
                  gamma =
                      upload(rounded(random_floats(d, seed + 1, 0.5f, 1.5f), dtype), {d}, dtype),
                  dy = upload(rounded(random_floats(n, seed + 2), dtype), shape, dtype),
                  residual = upload(rounded(random_floats(n, seed + 3), dtype), shape, dtype),
                  mean = upload(random_floats(rows, seed + 4, -0.1f, 0.1f), {rows}, DType::f32),
                  rstd = upload(random_floats(rows, seed + 5, 0.5f, 1.5f), {rows}, DType::f32);
  const std::vector<float> grad_init = random_floats(d, seed + 6);
  for (Tail tail : {Tail::dropout_bias, Tail::add_dropout_bias}) {
    INFO((tail == Tail::dropout_bias ? "layernorm_backward_dropout_bias"
                                     : "layernorm_backward_add_dropout_bias"));
    const auto call = [&](BackwardRun& out, const Tensor& keep_bits) {
      if (tail == Tail::dropout_bias)
        layernorm_backward_dropout_bias(
            dy.view, x.view, gamma.view, mean.view, rstd.view, out.dx.view, out.d_gamma.view,
            out.d_beta.view, out.d_branch.view, p, key, out.d_branch_bias.view, keep_bits);
      else
        layernorm_backward_add_dropout_bias(dy.view, x.view, gamma.view, mean.view, rstd.view,
                                            residual.view, out.dx.view, out.d_gamma.view,
                                            out.d_beta.view, out.d_branch.view, p, key,
                                            out.d_branch_bias.view, keep_bits);
    };
    BackwardRun drawn(rows, d, dtype, grad_init), read(rows, d, dtype, grad_init),
        zeroed(rows, d, dtype, grad_init);
    call(drawn, Tensor());
    call(read, bits.view);
    check_same_backward(read, drawn);
    GpuTensor zero_bits = poisoned_bits(rows, d);
    CUDA_CHECK(cudaMemset(zero_bits.view.data, 0, zero_bits.view.bytes()));
    call(zeroed, zero_bits.view);
    check_identical("dx with zeroed bits", download(zeroed.dx.view), download(drawn.dx.view));
    check_all_dropped(download(zeroed.d_branch.view), download(zeroed.d_branch_bias.view),
                      grad_init);
  }
}

// dropout_backward_bias on the 16-byte packs (offset 0) and one element a thread (offset 1).
void check_dropout_backward_bias_reads(DType dtype, int64_t rows, int64_t d, float p) {
  const auto n = static_cast<size_t>(rows * d);
  const uint64_t seed = static_cast<uint64_t>(rows * 41 + d);
  const RngKey key{20250204, 53, static_cast<uint32_t>(d + rows)};
  const std::vector<float> grad_init = random_floats(d, seed + 1);
  const std::vector<uint8_t> mask = host_mask(rows, d, p, key);
  std::vector<int32_t> words(static_cast<size_t>(dropout_keep_bits_words(rows, d)), -1);
  std::memcpy(words.data(), mask.data(), mask.size());
  const GpuTensor bits = upload_i32(words, {static_cast<int64_t>(words.size())});
  GpuTensor zero_bits = poisoned_bits(rows, d);
  CUDA_CHECK(cudaMemset(zero_bits.view.data, 0, zero_bits.view.bytes()));
  for (int offset : {0, 1}) {
    INFO("dropout_backward_bias: dtype " << dtype_name(dtype) << " rows " << rows << " d " << d
                                         << " p " << p << " offset " << offset);
    const GpuTensor dy = upload(rounded(nonzero_values(n, seed), dtype), {rows, d}, dtype, offset);
    GpuTensor drawn = gpu_poisoned({rows, d}, dtype, offset),
              read = gpu_poisoned({rows, d}, dtype, offset),
              zeroed = gpu_poisoned({rows, d}, dtype, offset);
    GpuTensor drawn_db = upload(grad_init, {d}, DType::f32),
              read_db = upload(grad_init, {d}, DType::f32),
              zeroed_db = upload(grad_init, {d}, DType::f32);
    dropout_backward_bias(dy.view, drawn.view, p, key, drawn_db.view);
    dropout_backward_bias(dy.view, read.view, p, key, read_db.view, bits.view);
    dropout_backward_bias(dy.view, zeroed.view, p, key, zeroed_db.view, zero_bits.view);
    check_identical("dx", download(read.view), download(drawn.view));
    check_identical("db", download(read_db.view), download(drawn_db.view));
    check_all_dropped(download(zeroed.view), download(zeroed_db.view), grad_init);
  }
}

// Runs check(dtype, rows, d, p) over the 16-bit dtypes, widths, row counts and dropouts.
template <typename Check>
void for_each_half_case(Check check) {
  for (DType dtype : kHalfDtypes)
    for (int64_t d : kWidths)
      for (int64_t rows : kRowCounts)
        for (float p : kDropouts) check(dtype, rows, d, p);
}

}  // namespace

TEST_CASE("cuda dropout_residual_layernorm_forward stores the keep mask as bits",
          "[cuda][layernorm][dropout][keep_bits]") {
  for_each_half_case(check_forward_stores);
}

TEST_CASE("cuda dropout_residual_layernorm_forward declines to store the mask off the 16-bit packs",
          "[cuda][layernorm][dropout][keep_bits]") {
  check_forward_declines("f32, 4-element packs", ForwardCase(257, 512, DType::f32), 0.1f);
  check_forward_declines("f32, 4-element packs", ForwardCase(3, 64, DType::f32), 0.3f);
  for (DType dtype : kHalfDtypes) {
    check_forward_declines("d % 8 != 0 (one element a lane)", ForwardCase(257, 100, dtype), 0.1f);
    check_forward_declines("d > 1024 (generic path)", ForwardCase(33, 1040, dtype), 0.1f);
    check_forward_declines("tensors off 16-byte alignment", ForwardCase(257, 512, dtype, 1), 0.1f);
    check_forward_declines("the residual off 16-byte alignment (the two ops)",
                           ForwardCase(257, 512, dtype, 2), 0.1f);
    check_forward_declines("p = 0", ForwardCase(257, 512, dtype), 0.0f);
  }
}

TEST_CASE("cuda LayerNorm backward tails give the same bits with the forward's mask bits",
          "[cuda][layernorm][dropout][keep_bits]") {
  for_each_half_case(check_backward_reads);
}

TEST_CASE("cuda dropout_backward_bias gives the same bits with the mask bits",
          "[cuda][bias_grad_tails][dropout][keep_bits]") {
  for (DType dtype : {DType::bf16, DType::f16, DType::f32})
    for (int64_t d : {8, 520})
      for (int64_t rows : {3, 257})
        for (float p : kDropouts) check_dropout_backward_bias_reads(dtype, rows, d, p);
}

TEST_CASE("cuda keep_bits of the wrong size, dtype or place are rejected, naming the op",
          "[cuda][layernorm][errors][keep_bits]") {
  const int64_t rows = 3, d = 64;
  const ForwardCase in(rows, d, DType::bf16);
  ForwardOutputs out = in.outputs();
  const GpuTensor short_bits = gpu_poisoned({dropout_keep_bits_words(rows, d) - 1}, DType::i32),
                  f32_bits = gpu_poisoned({dropout_keep_bits_words(rows, d)}, DType::f32);
  const auto has = [](const std::string& message, const char* what) {
    INFO("message: " << message);
    return message.find(what) != std::string::npos;
  };
  CHECK(has(invalid_argument_message([&] { in.run(out, 0.1f, {}, short_bits.view); }),
            "dropout_residual_layernorm_forward: keep_bits has shape [5] i32 cuda, expected [6]"));
  CHECK(has(invalid_argument_message([&] { in.run(out, 0.1f, {}, f32_bits.view); }),
            "dropout_residual_layernorm_forward: keep_bits must be i32"));
  // keep_bits over the first words of d_branch, which the tails write.
  const std::vector<float> grad_init(d, 0.0f);
  BackwardRun back(rows, d, DType::bf16, grad_init);
  const Tensor in_d_branch = make_view(back.d_branch.view.data, DType::i32, Device::cuda,
                                       {dropout_keep_bits_words(rows, d)});
  CHECK(has(invalid_argument_message([&] {
              layernorm_backward_dropout_bias(
                  out.y.view, out.sum.view, in.gamma.view, out.mean.view, out.rstd.view,
                  back.dx.view, back.d_gamma.view, back.d_beta.view, back.d_branch.view, 0.1f, {},
                  back.d_branch_bias.view, in_d_branch);
            }),
            "layernorm_backward_dropout_bias: keep_bits [6] i32 cuda must not overlap d_branch"));
  CHECK(has(invalid_argument_message([&] {
              dropout_backward_bias(out.y.view, back.d_branch.view, 0.1f, {},
                                    back.d_branch_bias.view, in_d_branch);
            }),
            "dropout_backward_bias: keep_bits [6] i32 cuda must not overlap dx"));
}

}  // namespace nmt::test
