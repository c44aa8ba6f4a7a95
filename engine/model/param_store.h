// ParamStore: every model parameter as a named view into one flat fp32 master buffer, with a
// gradient buffer of the same layout. Parameters are laid out in the order backward finishes them
// (the reverse of registration, which follows forward), so gradient buckets fill front to back.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "engine/model/arena.h"
#include "engine/model/param_init.h"
#include "kernels/tensor.h"

namespace nmt {

enum class ParamKind : uint8_t { weight, bias, norm_gain, norm_bias, embedding };

struct Param {
  std::string name;            // PyTorch-style: encoder.layers.0.self_attn.q_proj.weight
  std::vector<int64_t> shape;  // e.g. [out, in]
  ParamKind kind = ParamKind::weight;
  int64_t offset = 0;  // elements into the flat buffers
  int64_t numel = 0;
  Tensor value;    // view into the fp32 master buffer
  Tensor compute;  // what the ops read: `value` itself in fp32, else the bf16/fp16 copy
  Tensor grad;     // view into the fp32 gradient buffer
};

// Parameters of one shape laid out back to back, in `members` order, and seen as one tensor whose
// first dimension is the members' sum: the q, k and v projection weights as one [3d, d] matrix, so
// one GEMM computes all three projections. The members stay parameters of their own (names,
// checkpoints, initialisation); the joined views are set by finalize(). A group may itself be
// joined with others into a bigger one (ParamStore::join_groups); its views are then slices of
// that one's.
struct ParamGroup {
  std::vector<Param*> members;
  std::vector<int64_t> shape;  // e.g. [3 * out, in]
  Tensor compute;              // what the ops read, as Param::compute
  Tensor grad;                 // f32, as Param::grad
};

class ParamStore {
 public:
  // Registers a parameter; the returned pointer stays valid for the store's life. Views are set by
  // finalize().
  Param* add(const std::string& name, std::vector<int64_t> shape, ParamKind kind);

  // Lays `members` (registered, of one kind and one shape, in no other group) out back to back in
  // this order, where the first of them to come in the layout would have gone. The returned
  // pointer stays valid for the store's life; views are set by finalize(). Throws
  // std::logic_error for an empty group, mixed shapes or kinds, or a parameter in two groups.
  const ParamGroup* join(const std::vector<Param*>& members);

  // Joins groups made by join() (members of one kind and shape) into one group whose members are
  // theirs, part after part: every decoder layer's cross-attention k|v [2d, d] as one [L * 2d, d]
  // matrix [k0; v0; k1; v1; ...], so one GEMM projects all layers. Each part keeps its views,
  // now slices of the joined one's. The joined group is laid out as a whole directly in front of
  // `before` (in front of its group, if it has one), not where its members would have gone: the
  // caller puts it where backward finishes its gradients. Throws std::logic_error for no parts, a
  // part not made by join() or already joined, mixed kinds or shapes, or a `before` that is not a
  // parameter of this store in no joined group.
  const ParamGroup* join_groups(const std::vector<const ParamGroup*>& parts, const Param* before);

  // Lays out every parameter and carves master and gradient buffers from the arena, plus a working
  // copy in `compute_dtype` when that is not f32 (mixed precision).
  void finalize(Arena& arena, DType compute_dtype = DType::f32);

  // Refreshes the working copy from the master weights (after initialisation, loading, broadcast
  // and every optimizer update); nothing to do in fp32.
  void sync_compute();

  // Deterministic initialisation from the seed (same values on every backend and rank): the
  // projections as `scheme` says (engine/model/param_init.h), embeddings N(0, d^-1/2), norm gains
  // 1, norm biases 0.
  void initialize(uint64_t seed, InitScheme scheme = InitScheme::xavier);

  const std::deque<Param>& params() const { return params_; }
  std::deque<Param>& params() { return params_; }
  const Param* find(const std::string& name) const;
  int64_t total_elements() const { return total_; }
  Tensor master() const { return master_.flat(); }  // [total] f32
  Tensor grads() const { return grads_.flat(); }    // [total] f32
  DType compute_dtype() const { return compute_dtype_; }
  // [total] in compute_dtype(): the working copy, or empty in fp32 (the ops read the master).
  Tensor working_copy() const { return compute_dtype_ == DType::f32 ? Tensor() : compute_.flat(); }

 private:
  std::deque<Param> params_;
  std::deque<ParamGroup> groups_;
  // join_groups' groups, each with the parameter it is laid out in front of.
  struct JoinedGroups {
    ParamGroup group;
    const Param* before;
  };
  std::deque<JoinedGroups> joined_;
  int64_t total_ = 0;
  DType compute_dtype_ = DType::f32;
  Buffer master_, grads_, compute_;
};

}  // namespace nmt
