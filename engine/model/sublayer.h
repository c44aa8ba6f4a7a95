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

class Sublayer {
 public:
  // f(in [rows, d], out [rows, d] written); f_backward(d_f [rows, d], d_in [rows, d], how):
  // d_in written (=) or added to (+=, post-norm: d_in already holds the residual's gradient).
  using Forward = std::function<void(const Tensor& in, Tensor& out)>;
  using Backward = std::function<void(const Tensor& d_f, Tensor& d_in, DxWrite d_in_write)>;

  Sublayer(ParamStore& store, const std::string& norm_name, const ModelShape& shape,
           uint32_t dropout_id);
  void plan(Arena& arena, int64_t max_rows);

  // x: [rows, d_model], kept alive until backward. Returns the output view (owned here).
  Tensor forward(const Tensor& x, const StepContext& ctx, const Forward& f);
  // d_out: [rows, d_model]; d_x: [rows, d_model] written (=), may alias d_out. f_bias_grad:
  // [d_model] f32, the gradient of f's output bias (its last linear layer's), += the column sums
  // of the d_f handed to f_backward, added in the pass that writes d_f; f_backward must therefore
  // not add them again (AttentionBlock / FeedForwardBlock::backward do not).
  void backward(const Tensor& d_out, Tensor& d_x, Workspace& ws, Tensor& f_bias_grad,
                const Backward& f_backward);

 private:
  ModelShape shape_;
  uint32_t dropout_id_;
  Param *gain_, *bias_;
  Buffer out_, f_out_, normed_, mean_, rstd_;  // normed_: LN input (post) or LN output (pre)
  Tensor x_;
  RngKey key_;
  float p_ = 0;
};

}  // namespace nmt
