// FeedForwardBlock: fc2(dropout(relu(fc1(x)))), the position-wise feed-forward network.
#pragma once

#include <string>

#include "engine/model/arena.h"
#include "engine/model/model_shape.h"
#include "engine/model/param_store.h"
#include "engine/model/workspace.h"
#include "kernels/linear.h"
#include "kernels/philox.h"

namespace nmt {

// Whether the GPU feed-forward blocks keep where dropout(relu(fc1(x))) > 0 as bits
// (dropout_forward_positive_bits) for their backward's ReLU tail to read instead of the hidden
// activations: a 16th of the bytes at bf16, the same results. On by default;
// NMT_FFN_POSITIVE_BITS=0 or the setter turns it off (read where a block is planned; for A/B
// timing).
void set_ffn_positive_bits(bool on);
bool ffn_positive_bits();

class FeedForwardBlock {
 public:
  FeedForwardBlock(ParamStore& store, const std::string& prefix, const ModelShape& shape,
                   uint32_t dropout_id);
  // own_hidden_grad: fc1's output gradient goes to a buffer of this block's instead of the
  // workspace's f1, so that fc1's weight-gradient product can wait in the workspace's dw_queue
  // (QueuedGrads::all; fc2's reads the sublayer's own d_f slot). training: the backward's mask
  // bits are planned (positive_bits_) where they apply.
  void plan(Arena& arena, int64_t max_rows, bool own_hidden_grad = false, bool training = true);

  // x: [rows, d_model], kept alive until backward; out: [rows, d_model] written.
  void forward(const Tensor& x, const StepContext& ctx, Tensor& out);
  // d_out: [rows, d_model]; d_x: [rows, d_model] written (=) or added to (+=) as d_x_write says.
  // fc2's bias gradient is not added here: the sublayer adds d_out's column sums into
  // output_bias_grad() while writing d_out. Where ws.dw_queue is on and this block has its own
  // hidden gradient buffer, fc1's and fc2's weight-gradient products (fc2's only where d_out is
  // not in a shared workspace slot) wait there instead of running.
  void backward(const Tensor& d_out, Tensor& d_x, Workspace& ws, DxWrite d_x_write);
  // fc2's bias gradient, [d_model] f32, for the sublayer that writes d_out to add into.
  Tensor& output_bias_grad() { return fc2_b_->grad; }
  // Whether the last forward stored the positive bits its backward reads (instead of the hidden
  // activations).
  bool positive_bits_set() const { return !written_bits_.empty(); }

 private:
  ModelShape shape_;
  uint32_t dropout_id_;
  Param *fc1_w_, *fc1_b_, *fc2_w_, *fc2_b_;
  Buffer hidden_;  // [max_rows, ffn_dim]: relu(fc1(x)) after dropout
  Buffer d_hidden_;  // [max_rows, ffn_dim]: fc1's output gradient, where planned (own_hidden_grad)
  // [dropout_keep_bits_words(max_rows, ffn_dim)] i32: where hidden_ > 0, on the GPU with relu
  // dropout (ffn_positive_bits); written_bits_ is the view of them the last forward wrote (empty
  // where it wrote none), which backward reads.
  Buffer positive_bits_;
  Tensor written_bits_;
  Tensor x_;
  RngKey key_;
  float p_ = 0;
};

}  // namespace nmt
