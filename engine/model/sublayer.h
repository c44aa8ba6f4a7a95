// Sublayer: the residual + layer-norm wrapper around one block (attention or feed-forward).
//   post-norm (the paper):  out = LN(x + dropout(f(x)))
//   pre-norm:               out = x + dropout(f(LN(x)))
#pragma once

#include <functional>
#include <string>

#include "engine/model/arena.h"
#include "engine/model/model_shape.h"
#include "engine/model/param_store.h"
#include "engine/model/workspace.h"
#include "kernels/linear.h"
#include "kernels/philox.h"

namespace nmt {

// Pre-norm joins each sublayer's residual add with the LayerNorm that reads its output (the next
// sublayer's own, or the stack's final norm), forward and backward; the stacks (transformer.cpp,
// transformer_layers.cpp) pass each sublayer its neighbours' parts:
//
// NormInto: a LayerNorm that reads a sublayer's output, which Sublayer::forward computes in the
// pass that adds the residual (dropout_residual_layernorm_forward).
struct NormInto {
  const Param* gain = nullptr;  // [d] (compute copies read)
  const Param* bias = nullptr;
  Tensor y, mean, rstd;  // [rows, d] written; [rows] f32 written
};

// BranchTail: the sublayer below's dropout and its block's output bias gradient. The sublayer
// above writes that sublayer's branch gradient (its dropout backward, into the workspace's s1) in
// the pass that writes its own input gradient (layernorm_backward_add_dropout_bias); the sublayer
// below then starts from it (Sublayer::backward's branch_ready).
struct BranchTail {
  float p = 0;
  RngKey key;
  Tensor* f_bias_grad = nullptr;  // [d] f32, accumulated
  // The mask of p and key as that sublayer's forward stored it ([dropout_keep_bits_words(rows, d)]
  // i32, kernels/philox.h), or empty where it did not: the backward then draws it.
  Tensor keep_bits;
  // Where that sublayer wants its branch gradient: [rows, d], or empty for the workspace's s1.
  Tensor into;
};

// Whether the sublayers save their residual dropout's keep mask as bits in forward for the backward
// to read (where the kernels can: CUDA, bf16 / f16, dropout on) instead of drawing it again. On by
// default; NMT_LAYERNORM_KEEP_BITS=0 in the environment, or set_layernorm_keep_bits(false), turns
// it off (for A/B timing: the gradients are the same bits either way). A model reads it once, when
// it plans its memory (its constructor), so a model keeps one setting for its life.
void set_layernorm_keep_bits(bool on);
bool layernorm_keep_bits();

class Sublayer {
 public:
  // f(in [rows, d], out [rows, d] written); f_backward(d_f [rows, d], d_in [rows, d], how):
  // d_in written (=) or added to (+=, post-norm: d_in already holds the residual's gradient).
  using Forward = std::function<void(const Tensor& in, Tensor& out)>;
  using Backward = std::function<void(const Tensor& d_f, Tensor& d_in, DxWrite d_in_write)>;

  Sublayer(ParamStore& store, const std::string& norm_name, const ModelShape& shape,
           uint32_t dropout_id);
  // own_branch_slot: the gradient handed to f_backward (d_f) goes to a buffer of this sublayer's
  // instead of the workspace's shared slot, so it stays as it is after the layer's backward (the
  // attention blocks' queued weight gradients read it at the end of the model's; WeightGradQueue).
  void plan(Arena& arena, int64_t max_rows, bool own_branch_slot = false);

  // x: [rows, d_model], kept alive until backward. Returns the output view (owned here).
  // Pre-norm only (ignored post-norm): `next`, when given, is the LayerNorm that reads the output,
  // computed in the same pass; `input_normed`: the sublayer below already wrote this sublayer's
  // LayerNorm (its `next` was input_norm()), so it is not computed again.
  Tensor forward(const Tensor& x, const StepContext& ctx, const Forward& f,
                 const NormInto* next = nullptr, bool input_normed = false);
  // d_out: [rows, d_model]; d_x: [rows, d_model] written (=), may alias d_out. f_bias_grad:
  // [d_model] f32, the gradient of f's output bias (its last linear layer's), += the column sums
  // of the d_f handed to f_backward, added in the pass that writes d_f; f_backward must therefore
  // not add them again (AttentionBlock / FeedForwardBlock::backward do not).
  // Pre-norm only: `below`, when given, is the sublayer below's tail, whose branch gradient this
  // pass writes (into below->into, or ws.s1); `branch_ready`: the op above wrote this sublayer's
  // branch gradient (into its branch_tail().into, or ws.s1) and added its f_bias_grad already.
  void backward(const Tensor& d_out, Tensor& d_x, Workspace& ws, Tensor& f_bias_grad,
                const Backward& f_backward, const BranchTail* below = nullptr,
                bool branch_ready = false);

  // This sublayer's own LayerNorm as the `next` of the sublayer below (pre-norm), for `rows` rows.
  NormInto input_norm(int64_t rows) const;
  // This sublayer's dropout (as of the last forward) with its block's output bias gradient.
  BranchTail branch_tail(Tensor& f_bias_grad) const {
    return BranchTail{p_, key_, &f_bias_grad, kept_bits(), own_slot()};
  }

 private:
  // The mask the last forward stored, or empty where it stored none.
  Tensor kept_bits() const;
  // This sublayer's own d_f buffer for the last forward's rows, or empty where it has none.
  Tensor own_slot() const;
  // Where backward puts d_f: the own buffer, else the workspace's s1 (pre-norm) or s2 (post-norm).
  Tensor d_f_slot(const Workspace& ws) const;

  ModelShape shape_;
  uint32_t dropout_id_;
  Param *gain_, *bias_;
  Buffer out_, f_out_, normed_, mean_, rstd_;  // normed_: LN input (post) or LN output (pre)
  // Where forward stores its dropout's keep mask ([dropout_keep_bits_words(max_rows, d)] i32),
  // planned where the kernels can (plan); kept_bits_: the last forward stored it there (a forward
  // without dropout, or through another kernel, clears it, so no backward reads a stale mask).
  Buffer keep_bits_;
  bool kept_bits_ = false;
  Buffer branch_;  // [max_rows, d]: d_f, where plan was asked for a slot of its own
  Tensor x_;
  RngKey key_;
  float p_ = 0;
};

}  // namespace nmt
