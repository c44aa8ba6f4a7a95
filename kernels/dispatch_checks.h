// Checks shared by the op dispatch files (kernels/<op>.cpp): dtype, same-shape and device checks
// with messages that name the op, and the error for ops whose CUDA backend is not wired yet.
#pragma once

#include <string>

#include "kernels/attention.h"
#include "kernels/tensor.h"

namespace nmt::detail {

// Throws std::invalid_argument "<op>: <name> must be f32 on the CPU, got [..] bf16 cpu".
void require_dtype(const char* op, const char* name, const Tensor& t, DType dtype);

// Throws std::invalid_argument unless `t` has exactly the rank and dims of `like`.
void require_same_shape(const char* op, const char* name, const Tensor& t, const char* like_name,
                        const Tensor& like);

// Throws std::invalid_argument "<op>: <name> has shape [..], expected rank <rank> <layout>".
void require_rank(const char* op, const char* name, const Tensor& t, int rank, const char* layout);

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
