// The one check library of the ops: shape, rank, dtype, device, data and memory-overlap checks
// with messages that name the op and the tensor, used by the dispatch files (kernels/<op>.cpp) and
// by the CUDA side (kernels/cuda/) for what its kernels assume, and the error for ops whose CUDA
// backend is not wired yet. check_shape and check_same_device are also used above the kernels
// (engine/decode).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "kernels/attention.h"
#include "kernels/tensor.h"

namespace nmt {

// Throws std::invalid_argument naming the op and both shapes when the check fails.
void check_shape(const char* op, const char* name, const Tensor& t,
                 std::initializer_list<int64_t> dims);
// Throws std::invalid_argument unless every non-empty tensor lives on one device.
void check_same_device(const char* op, std::initializer_list<const Tensor*> tensors);

}  // namespace nmt

namespace nmt::detail {

// Throws std::invalid_argument "<op>: <name> must be f32 on the CPU, got [..] bf16 cpu".
void require_dtype(const char* op, const char* name, const Tensor& t, DType dtype);
// Throws unless `t` has the dtype of `like`.
void require_same_dtype(const char* op, const char* name, const Tensor& t, const char* like_name,
                        const Tensor& like);

// Throws std::invalid_argument unless `t` has exactly the rank and dims of `like`.
void require_same_shape(const char* op, const char* name, const Tensor& t, const char* like_name,
                        const Tensor& like);

// Throws std::invalid_argument "<op>: dropout probability <p> is outside [0, 1)".
void require_dropout_p(const char* op, float p);

// Throws std::invalid_argument "<op>: <name> has shape [..], expected rank <rank> <layout>"
// (without the layout when it is null).
void require_rank(const char* op, const char* name, const Tensor& t, int rank,
                  const char* layout = nullptr);

// Throws unless `t` has data whenever it has elements.
void require_data(const char* op, const char* name, const Tensor& t);

// Whether the bytes of the two tensors overlap (a tensor without data or elements overlaps
// nothing).
bool overlaps(const Tensor& a, const Tensor& b);
// Throws std::invalid_argument "<op>: <name> [..] must not overlap <other_name> [..]" when the
// bytes of the two tensors overlap (overlaps).
void require_disjoint(const char* op, const char* name, const Tensor& t, const char* other_name,
                      const Tensor& other);
// As require_disjoint, but the very same memory (same data, same byte count) passes: an
// elementwise output written over its input.
void require_disjoint_or_same(const char* op, const char* name, const Tensor& t,
                              const char* other_name, const Tensor& other);
// The overlaps the LayerNorm backward's dropout-bias tails forbid (layernorm_backward_dropout_bias
// and _add_dropout_bias, their dispatch and their CUDA entry): without a residual dx may be dy
// itself; dx apart from x; d_branch apart from dy, x, dx (and the residual); d_branch_bias apart
// from dy, dx and d_branch.
void require_branch_tail_apart(const char* op, const Tensor& dy, const Tensor& x,
                               const Tensor* residual, const Tensor& dx, const Tensor& d_branch,
                               const Tensor& d_branch_bias);
// Throws std::invalid_argument unless `t` is empty or lives on the GPU.
void require_cuda(const char* op, const char* name, const Tensor& t);

struct NamedTensor {
  const char* name;
  const Tensor* tensor;
};
// require_cuda and require_data for each tensor.
void require_on_gpu(const char* op, std::initializer_list<NamedTensor> tensors);
// For optional arguments, which a Tensor without data (a default Tensor) leaves out: require_cuda.
void require_optional_on_gpu(const char* op, std::initializer_list<NamedTensor> tensors);
// An optional saved dropout mask (kernels/philox.h): empty, or [dropout_keep_bits_words(rows, d)]
// i32 whose bytes overlap none of `apart` (what the op writes, or reads while it writes the mask);
// throws std::invalid_argument naming the op otherwise.
void require_keep_bits(const char* op, const Tensor& keep_bits, int64_t rows, int64_t d,
                       std::initializer_list<NamedTensor> apart);
// A dropout-layout bit mask the op requires (kernels/philox.h): [dropout_keep_bits_words(rows, d)]
// i32 apart from `apart`, named `name` in the message otherwise.
void require_mask_bits(const char* op, const char* name, const Tensor& bits, int64_t rows,
                       int64_t d, std::initializer_list<NamedTensor> apart);

// The data of a CPU tensor as f32 / i32; throws std::invalid_argument naming the op and tensor when
// the dtype differs ("the ops are fp32-only on the CPU") or a non-empty shape has no data.
float* cpu_f32(const char* op, const char* name, const Tensor& t);
int32_t* cpu_i32(const char* op, const char* name, const Tensor& t);

// Throws std::invalid_argument naming the op for a negative length or batch, no heads, no head
// dimension, or a dropout probability outside [0, 1).
void check_attention_shape(const char* op, const AttentionShape& shape, float dropout_p);

// The device every non-empty tensor of the call lives on (after check_same_device).
Device call_device(std::initializer_list<const Tensor*> tensors);

// Throws std::runtime_error "<op>: the CUDA backend of this op is not built yet".
[[noreturn]] void throw_cuda_not_built(const char* op);

}  // namespace nmt::detail
