// FeedForwardBlock forward and backward.
#include "engine/model/feed_forward_block.h"

#include "kernels/bias_grad_tails.h"
#include "kernels/elementwise.h"
#include "kernels/env_switch.h"
#include "kernels/linear.h"

namespace nmt {
namespace {

EnvSwitch positive_bits_switch("NMT_FFN_POSITIVE_BITS", /*default_on=*/true);

}  // namespace

void set_ffn_positive_bits(bool on) {
  positive_bits_switch.set(on);
}

bool ffn_positive_bits() {
  return positive_bits_switch.get();
}

FeedForwardBlock::FeedForwardBlock(ParamStore& store, const std::string& prefix,
                                   const ModelShape& shape, uint32_t dropout_id)
    : shape_(shape), dropout_id_(dropout_id) {
  int64_t d = shape.d_model, f = shape.ffn_dim;
  fc1_w_ = store.add(prefix + ".fc1.weight", {f, d}, ParamKind::weight);
  fc1_b_ = store.add(prefix + ".fc1.bias", {f}, ParamKind::bias);
  fc2_w_ = store.add(prefix + ".fc2.weight", {d, f}, ParamKind::weight);
  fc2_b_ = store.add(prefix + ".fc2.bias", {d}, ParamKind::bias);
}

void FeedForwardBlock::plan(Arena& arena, int64_t max_rows, bool own_hidden_grad, bool training) {
  hidden_ = arena.allocate("ffn.hidden", shape_.compute_dtype, max_rows * shape_.ffn_dim);
  if (own_hidden_grad)
    d_hidden_ = arena.allocate("ffn.d_hidden", shape_.compute_dtype, max_rows * shape_.ffn_dim);
  if (training && arena.device() == Device::cuda && shape_.relu_dropout > 0 && ffn_positive_bits())
    positive_bits_ = arena.allocate("ffn.positive_bits", DType::i32,
                                    dropout_keep_bits_words(max_rows, shape_.ffn_dim));
}

void FeedForwardBlock::forward(const Tensor& x, const StepContext& ctx, Tensor& out) {
  int64_t rows = x.dim(0);
  x_ = x;
  key_ = ctx.key(dropout_id_);
  p_ = ctx.training ? shape_.relu_dropout : 0.0f;
  Tensor h = hidden_.view({rows, shape_.ffn_dim});
  written_bits_ = p_ > 0 && positive_bits_.capacity > 0
                      ? positive_bits_.view({dropout_keep_bits_words(rows, shape_.ffn_dim)})
                      : Tensor();
  if (!written_bits_.empty()) {
    // On a Hopper GPU one kernel: the product with bias, ReLU, dropout and the bits in its
    // epilogue.
    linear_relu_dropout_forward(x, fc1_w_->compute, fc1_b_->compute, p_, key_, h, written_bits_);
  } else {
    linear_relu_forward(x, fc1_w_->compute, fc1_b_->compute, h);  // ReLU in the GEMM epilogue
    if (p_ > 0) dropout_forward(h, h, p_, key_);
  }
  linear_forward(h, fc2_w_->compute, fc2_b_->compute, out);
}

void FeedForwardBlock::backward(const Tensor& d_out, Tensor& d_x, Workspace& ws,
                                DxWrite d_x_write) {
  int64_t rows = x_.dim(0);
  Tensor h = hidden_.view({rows, shape_.ffn_dim});
  WeightGradQueue* queue = d_hidden_.capacity > 0 ? ws.open_queue() : nullptr;
  const bool queue_fc2 = queue != nullptr && !ws.holds(d_out);
  Tensor dh = (queue != nullptr ? d_hidden_ : ws.f1).view({rows, shape_.ffn_dim});
  Tensor no_bias;  // a bias gradient added elsewhere: linear_backward skips its column sums
  Tensor fc2_dw = queue_fc2 ? Tensor() : fc2_w_->grad, fc1_dw = queue ? Tensor() : fc1_w_->grad;
  linear_backward(d_out, h, fc2_w_->compute, dh, fc2_dw, no_bias);
  if (queue_fc2) queue->push({d_out, h, fc2_w_->grad});
  // h holds the relu output after dropout: h > 0 exactly where dropout kept the element and the
  // relu passed it, so one pass over dh applies both masks (and 1 / (1 - p)), no mask redrawn,
  // reading that mask from the forward's bits where it kept them, else from h. The same pass adds
  // fc1's bias gradient (dh's column sums) instead of a second read of dh.
  relu_dropout_backward_bias(dh, h, dh, p_, fc1_b_->grad, written_bits_);
  linear_backward(dh, x_, fc1_w_->compute, d_x, fc1_dw, no_bias, d_x_write);
  if (queue != nullptr) queue->push({dh, x_, fc1_w_->grad});
}

}  // namespace nmt
