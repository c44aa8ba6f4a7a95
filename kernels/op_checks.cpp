// The ops' check library: shape, rank, dtype, device, data and overlap checks naming the op.
#include "kernels/op_checks.h"

#include <cstdint>
#include <sstream>
#include <stdexcept>

#include "kernels/philox.h"

namespace nmt {

void check_shape(const char* op, const char* name, const Tensor& t,
                 std::initializer_list<int64_t> dims) {
  bool ok = t.rank == static_cast<int>(dims.size());
  int i = 0;
  for (int64_t d : dims) {
    if (ok && t.shape[i] != d) ok = false;
    ++i;
  }
  if (!ok) {
    std::ostringstream os;
    os << op << ": " << name << " has shape " << t.shape_string() << ", expected [";
    i = 0;
    for (int64_t d : dims) os << (i++ ? ", " : "") << d;
    os << "]";
    throw std::invalid_argument(os.str());
  }
}

void check_same_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t || t->empty()) continue;
    if (!first) first = t;
    if (t->device != first->device)
      throw std::invalid_argument(std::string(op) + ": tensors on different devices (" +
                                  first->shape_string() + " vs " + t->shape_string() + ")");
  }
}

}  // namespace nmt

namespace nmt::detail {
namespace {

[[noreturn]] void fail(const char* op, const std::string& what) {
  throw std::invalid_argument(std::string(op) + ": " + what);
}

}  // namespace

void require_dtype(const char* op, const char* name, const Tensor& t, DType dtype) {
  if (t.dtype != dtype)
    fail(op, std::string(name) + " must be " + dtype_name(dtype) + ", got " + t.shape_string());
}

void require_same_dtype(const char* op, const char* name, const Tensor& t, const char* like_name,
                        const Tensor& like) {
  if (t.dtype != like.dtype)
    fail(op, std::string(name) + " " + t.shape_string() + " must have the dtype of " + like_name +
                 " " + like.shape_string());
}

void require_same_shape(const char* op, const char* name, const Tensor& t, const char* like_name,
                        const Tensor& like) {
  bool same = t.rank == like.rank;
  for (int i = 0; same && i < t.rank; ++i) same = t.shape[i] == like.shape[i];
  if (!same)
    fail(op, std::string(name) + " has shape " + t.shape_string() + ", expected the shape of " +
                 like_name + " " + like.shape_string());
}

void require_dropout_p(const char* op, float p) {
  if (!(p >= 0.0f && p < 1.0f))
    fail(op, "dropout probability " + std::to_string(p) + " is outside [0, 1)");
}

void require_rank(const char* op, const char* name, const Tensor& t, int rank, const char* layout) {
  if (t.rank != rank)
    fail(op, std::string(name) + " has shape " + t.shape_string() + ", expected rank " +
                 std::to_string(rank) + (layout ? std::string(" ") + layout : std::string()));
}

void require_data(const char* op, const char* name, const Tensor& t) {
  if (t.empty() && t.numel() != 0)
    fail(op, std::string(name) + " " + t.shape_string() + " has no data");
}

bool overlaps(const Tensor& a, const Tensor& b) {
  if (a.empty() || b.empty() || a.bytes() == 0 || b.bytes() == 0) return false;
  const auto a_begin = reinterpret_cast<uintptr_t>(a.data);
  const auto b_begin = reinterpret_cast<uintptr_t>(b.data);
  return a_begin < b_begin + b.bytes() && b_begin < a_begin + a.bytes();
}

namespace {

void fail_overlap(const char* op, const char* name, const Tensor& t, const char* other_name,
                  const Tensor& other, const char* allowed) {
  fail(op, std::string(name) + " " + t.shape_string() + " must not overlap " + other_name + " " +
               other.shape_string() + " in memory" + allowed);
}

}  // namespace

void require_disjoint(const char* op, const char* name, const Tensor& t, const char* other_name,
                      const Tensor& other) {
  if (overlaps(t, other)) fail_overlap(op, name, t, other_name, other, "");
}

void require_disjoint_or_same(const char* op, const char* name, const Tensor& t,
                              const char* other_name, const Tensor& other) {
  const bool same = t.data == other.data && t.bytes() == other.bytes();
  if (!same && overlaps(t, other))
    fail_overlap(op, name, t, other_name, other, " (it may be the very same memory)");
}

void require_branch_tail_apart(const char* op, const Tensor& dy, const Tensor& x,
                               const Tensor* residual, const Tensor& dx, const Tensor& d_branch,
                               const Tensor& d_branch_bias) {
  if (residual == nullptr) require_disjoint_or_same(op, "dx", dx, "dy", dy);
  require_disjoint(op, "dx", dx, "x", x);
  require_disjoint(op, "d_branch", d_branch, "dy", dy);
  require_disjoint(op, "d_branch", d_branch, "x", x);
  require_disjoint(op, "d_branch", d_branch, "dx", dx);
  if (residual != nullptr) require_disjoint(op, "d_branch", d_branch, "residual", *residual);
  require_disjoint(op, "d_branch_bias", d_branch_bias, "dy", dy);
  require_disjoint(op, "d_branch_bias", d_branch_bias, "dx", dx);
  require_disjoint(op, "d_branch_bias", d_branch_bias, "d_branch", d_branch);
}

void require_cuda(const char* op, const char* name, const Tensor& t) {
  if (!t.empty() && t.device != Device::cuda)
    fail(op, std::string(name) + " " + t.shape_string() + " must be on the GPU");
}

void require_on_gpu(const char* op, std::initializer_list<NamedTensor> tensors) {
  for (const NamedTensor& t : tensors) {
    require_cuda(op, t.name, *t.tensor);
    require_data(op, t.name, *t.tensor);
  }
}

void require_optional_on_gpu(const char* op, std::initializer_list<NamedTensor> tensors) {
  for (const NamedTensor& t : tensors) require_cuda(op, t.name, *t.tensor);
}

void require_keep_bits(const char* op, const Tensor& keep_bits, int64_t rows, int64_t d,
                       std::initializer_list<NamedTensor> apart) {
  if (keep_bits.empty()) return;
  require_mask_bits(op, "keep_bits", keep_bits, rows, d, apart);
}

void require_mask_bits(const char* op, const char* name, const Tensor& bits, int64_t rows,
                       int64_t d, std::initializer_list<NamedTensor> apart) {
  check_shape(op, name, bits, {dropout_keep_bits_words(rows, d)});
  require_dtype(op, name, bits, DType::i32);
  for (const NamedTensor& t : apart) require_disjoint(op, name, bits, t.name, *t.tensor);
}

float* cpu_f32(const char* op, const char* name, const Tensor& t) {
  require_dtype(op, name, t, DType::f32);
  require_data(op, name, t);
  return t.f32();
}

int32_t* cpu_i32(const char* op, const char* name, const Tensor& t) {
  require_dtype(op, name, t, DType::i32);
  require_data(op, name, t);
  return t.i32();
}

Device call_device(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t && !t->empty()) return t->device;
  return Device::cpu;  // nothing to touch: every tensor is empty, the CPU path is a no-op
}

void throw_cuda_not_built(const char* op) {
  throw std::runtime_error(std::string(op) + ": the CUDA backend of this op is not built yet");
}

void check_attention_shape(const char* op, const AttentionShape& shape, float dropout_p) {
  if (shape.batch < 0 || shape.q_len < 0 || shape.kv_len < 0 || shape.heads < 1 ||
      shape.head_dim < 1)
    throw std::invalid_argument(
        std::string(op) + ": invalid AttentionShape (batch " + std::to_string(shape.batch) +
        ", q_len " + std::to_string(shape.q_len) + ", kv_len " + std::to_string(shape.kv_len) +
        ", heads " + std::to_string(shape.heads) + ", head_dim " + std::to_string(shape.head_dim) +
        ")");
  if (!(dropout_p >= 0.0f && dropout_p < 1.0f))
    throw std::invalid_argument(std::string(op) + ": dropout probability " +
                                std::to_string(dropout_p) + " is outside [0, 1)");
}

}  // namespace nmt::detail
