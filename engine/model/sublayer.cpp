// Sublayer forward and backward for both norm placements.
#include "engine/model/sublayer.h"

#include "kernels/bias_grad_tails.h"
#include "kernels/elementwise.h"
#include "kernels/env_switch.h"
#include "kernels/layernorm.h"

namespace nmt {
namespace {

EnvSwitch keep_bits_switch("NMT_LAYERNORM_KEEP_BITS", /*default_on=*/true);

}  // namespace

void set_layernorm_keep_bits(bool on) {
  keep_bits_switch.set(on);
}

bool layernorm_keep_bits() {
  return keep_bits_switch.get();
}

Sublayer::Sublayer(ParamStore& store, const std::string& norm_name, const ModelShape& shape,
                   uint32_t dropout_id)
    : shape_(shape), dropout_id_(dropout_id) {
  gain_ = store.add(norm_name + ".weight", {shape.d_model}, ParamKind::norm_gain);
  bias_ = store.add(norm_name + ".bias", {shape.d_model}, ParamKind::norm_bias);
}

void Sublayer::plan(Arena& arena, int64_t max_rows, bool own_branch_slot) {
  int64_t n = max_rows * shape_.d_model;
  if (own_branch_slot) branch_ = arena.allocate("sublayer.branch", shape_.compute_dtype, n);
  out_ = arena.allocate("sublayer.out", shape_.compute_dtype, n);
  f_out_ = arena.allocate("sublayer.f_out", shape_.compute_dtype, n);
  normed_ = arena.allocate("sublayer.normed", shape_.compute_dtype, n);
  mean_ = arena.allocate("sublayer.mean", DType::f32, max_rows);
  rstd_ = arena.allocate("sublayer.rstd", DType::f32, max_rows);
  // The residual dropout's mask, where dropout_residual_layernorm_forward stores it: the CUDA
  // register path of the 16-bit dtypes in 8-element packs (the arena's views are aligned; widths
  // over 1024 decline at run time, and kept_bits_ says so).
  const bool half = shape_.compute_dtype == DType::bf16 || shape_.compute_dtype == DType::f16;
  if (arena.device() == Device::cuda && half && shape_.dropout > 0 && shape_.d_model % 8 == 0 &&
      layernorm_keep_bits())
    keep_bits_ = arena.allocate("sublayer.keep_bits", DType::i32,
                                dropout_keep_bits_words(max_rows, shape_.d_model));
}

Tensor Sublayer::kept_bits() const {
  if (!kept_bits_) return Tensor();
  return keep_bits_.view({dropout_keep_bits_words(x_.dim(0), shape_.d_model)});
}

Tensor Sublayer::own_slot() const {
  if (branch_.capacity == 0) return Tensor();
  return branch_.view({x_.dim(0), shape_.d_model});
}

Tensor Sublayer::d_f_slot(const Workspace& ws) const {
  const Tensor own = own_slot();
  return own.empty() ? (shape_.pre_norm ? ws.s1 : ws.s2).view({x_.dim(0), shape_.d_model}) : own;
}

NormInto Sublayer::input_norm(int64_t rows) const {
  return NormInto{gain_, bias_, normed_.view({rows, shape_.d_model}), mean_.view({rows}),
                  rstd_.view({rows})};
}

Tensor Sublayer::forward(const Tensor& x, const StepContext& ctx, const Forward& f,
                         const NormInto* next, bool input_normed) {
  int64_t rows = x.dim(0), d = shape_.d_model;
  x_ = x;
  key_ = ctx.key(dropout_id_);
  p_ = ctx.training ? shape_.dropout : 0.0f;
  kept_bits_ = false;  // until this forward's kernel says it stored the mask
  Tensor out = out_.view({rows, d}), f_out = f_out_.view({rows, d});
  Tensor normed = normed_.view({rows, d}), mean = mean_.view({rows}), rstd = rstd_.view({rows});
  // Where the residual pass may store its dropout mask (empty: nowhere). Whether it does depends on
  // the shape, dtype, alignment and p alone, so a CUDA graph's replay does what its capture did.
  const Tensor keep_bits =
      keep_bits_.capacity > 0 ? keep_bits_.view({dropout_keep_bits_words(rows, d)}) : Tensor();
  if (shape_.pre_norm) {
    if (!input_normed)
      layernorm_forward(x, gain_->compute, bias_->compute, normed, mean, rstd,
                        shape_.layernorm_eps);
    f(normed, f_out);
    if (next != nullptr) {
      // out = x + dropout(f_out) and the LayerNorm above reading it, in one pass: bit for bit
      // dropout_residual_add then layernorm_forward.
      Tensor y = next->y, m = next->mean, r = next->rstd;
      kept_bits_ = dropout_residual_layernorm_forward(x, f_out, out, p_, key_, next->gain->compute,
                                                      next->bias->compute, y, m, r,
                                                      shape_.layernorm_eps, keep_bits);
    } else {
      // One pass; f_out keeps f's output. Only decoding steps (no dropout) come here: a training
      // stack gives every pre-norm sublayer a `next` (the one above, or the final norm), so this op
      // has no mask to store.
      dropout_residual_add(x, f_out, out, p_, key_);
    }
  } else {
    f(x, f_out);
    // normed = x + dropout(f_out), the LN input the backward reads, and out = LN(normed) in one
    // pass: bit for bit dropout_residual_add then layernorm_forward.
    kept_bits_ = dropout_residual_layernorm_forward(x, f_out, normed, p_, key_, gain_->compute,
                                                    bias_->compute, out, mean, rstd,
                                                    shape_.layernorm_eps, keep_bits);
  }
  return out;
}

void Sublayer::backward(const Tensor& d_out, Tensor& d_x, Workspace& ws, Tensor& f_bias_grad,
                        const Backward& f_backward, const BranchTail* below, bool branch_ready) {
  int64_t rows = x_.dim(0), d = shape_.d_model;
  Tensor normed = normed_.view({rows, d}), mean = mean_.view({rows}), rstd = rstd_.view({rows});
  if (shape_.pre_norm) {
    Tensor g1 = d_f_slot(ws), g2 = ws.s2.view({rows, d});
    // d_f = dropout's backward of d_out (a copy when p is 0), and f's output bias gradient (d_f's
    // column sums) in the same pass, unless the op above did both.
    if (!branch_ready) dropout_backward_bias(d_out, g1, p_, key_, f_bias_grad, kept_bits());
    f_backward(g1, g2, DxWrite::assign);  // gradient w.r.t. LN(x)
    // d_x = d_out + the LN's input gradient in one pass (the residual's backward; d_x may be
    // d_out), bit for bit what layernorm_backward then residual_add computed; with a sublayer
    // below, the same pass writes its branch gradient (where its tail says; ws.s1 may be g1 itself,
    // which f_backward is done reading).
    if (below != nullptr) {
      Tensor branch = below->into.empty() ? ws.s1.view({rows, d}) : below->into;
      layernorm_backward_add_dropout_bias(g2, x_, gain_->compute, mean, rstd, d_out, d_x,
                                          gain_->grad, bias_->grad, branch, below->p, below->key,
                                          *below->f_bias_grad, below->keep_bits);
    } else {
      layernorm_backward_add(g2, x_, gain_->compute, mean, rstd, d_out, d_x, gain_->grad,
                             bias_->grad);
    }
  } else {
    // d_x = the LN's input gradient (in place when d_x is d_out) + f's input gradient: the
    // residual's share is stored first and f's last product adds its own into it (beta = 1), so
    // no separate residual add reads both again. The same pass that stores the LN's input
    // gradient writes d_f (its dropout backward) and adds f's output bias gradient (d_f's column
    // sums): one read of d_out for all three.
    Tensor g2 = d_f_slot(ws);
    layernorm_backward_dropout_bias(d_out, normed, gain_->compute, mean, rstd, d_x, gain_->grad,
                                    bias_->grad, g2, p_, key_, f_bias_grad, kept_bits());
    f_backward(g2, d_x, DxWrite::add);
  }
}

}  // namespace nmt
