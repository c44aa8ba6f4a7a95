// Transformer graph: parameter registration, memory plan, forward, loss, backward. The decoding
// entry points are in transformer_decoding.cpp.
#include "engine/model/transformer.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>

#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/stream.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/env_switch.h"
#include "kernels/layernorm.h"
#include "kernels/linear.h"

namespace nmt {
namespace {

// NMT_QUEUE_WEIGHT_GRADS=0: the blocks run every weight-gradient product in their
// layer's backward, and the model plans no buffers for holding them back (for A/B timing).
EnvSwitch queue_weight_grads_switch("NMT_QUEUE_WEIGHT_GRADS", /*default_on=*/true);
// NMT_QUEUE_LARGE_WEIGHT_GRADS=0: the queue takes only the attention's d x d products, not
// self-attention's joined q | k | v and the feed-forward fc1 and fc2 ones (whose gradients need
// buffers of their own: memory).
EnvSwitch queue_large_weight_grads_switch("NMT_QUEUE_LARGE_WEIGHT_GRADS", /*default_on=*/true);
// NMT_DEFER_PARTIAL_SUMS=0: each LayerNorm backward, and the attention backward's bias sums, run
// their second pass at once (no buffer).
EnvSwitch defer_partial_sums_switch("NMT_DEFER_PARTIAL_SUMS", /*default_on=*/true);
// NMT_OVERLAP_CAPTURE=0: a step with a grad-ready hook runs op by op, without the queue and the
// deferral (set_overlap_capture).
EnvSwitch overlap_capture_switch("NMT_OVERLAP_CAPTURE", /*default_on=*/true);

}  // namespace

void set_overlap_capture(bool on) {
  overlap_capture_switch.set(on);
}

bool overlap_capture() {
  return overlap_capture_switch.get();
}

void set_queue_weight_grads(bool on) {
  queue_weight_grads_switch.set(on);
}

void set_queue_large_weight_grads(bool on) {
  queue_large_weight_grads_switch.set(on);
}

bool queue_weight_grads() {
  return queue_weight_grads_switch.get();
}

bool queue_large_weight_grads() {
  return queue_large_weight_grads_switch.get();
}

void set_defer_partial_sums(bool on) {
  defer_partial_sums_switch.set(on);
}

bool defer_partial_sums() {
  return defer_partial_sums_switch.get();
}

Transformer::Transformer(const ModelShape& shape, Device device, int64_t max_rows, int64_t max_len,
                         ModelPlan plan)
    : shape_(shape),
      device_(device),
      plan_(plan),
      max_rows_(max_rows),
      max_len_(max_len),
      arena_(Arena::planner(device)) {
  if (shape.vocab <= kFirstRegularId) throw std::invalid_argument("model: vocabulary too small");
  if (shape.d_model % shape.heads != 0)
    throw std::invalid_argument("model: d_model must be a multiple of num_heads");
  int64_t v = shape.vocab, d = shape.d_model;
  // Registration follows forward; the store lays parameters out in reverse, and each group below is
  // a backward stage whose gradients are final together. Backward runs the stages in reverse of
  // this list (the shared table's last contribution is the source embedding's, so it goes first).
  // The order makes the layout follow backward, which the bucketed exchange needs to overlap it.
  std::vector<std::vector<const Param*>> stages;
  src_embed_ = params_.add("encoder.embed_tokens.weight", {v, d}, ParamKind::embedding);
  add_stage(stages, 0);
  for (int64_t i = 0; i < shape.encoder_layers; ++i) {
    size_t first = params_.params().size();
    encoder_.push_back(std::make_unique<EncoderLayer>(
        params_, "encoder.layers." + std::to_string(i), shape, dropout_ids_));
    add_stage(stages, first);
  }
  if (shape.pre_norm) {
    size_t first = params_.params().size();
    enc_norm_g_ = params_.add("encoder.layer_norm.weight", {d}, ParamKind::norm_gain);
    enc_norm_b_ = params_.add("encoder.layer_norm.bias", {d}, ParamKind::norm_bias);
    add_stage(stages, first);
  }
  size_t first = params_.params().size();
  tgt_embed_ = shape.shared_embeddings
                   ? src_embed_
                   : params_.add("decoder.embed_tokens.weight", {v, d}, ParamKind::embedding);
  add_stage(stages, first);
  src_embed_dropout_ = dropout_ids_.take();
  tgt_embed_dropout_ = dropout_ids_.take();
  const size_t decoder_first_param = params_.params().size(), decoder_first_stage = stages.size();
  for (int64_t i = 0; i < shape.decoder_layers; ++i) {
    first = params_.params().size();
    decoder_.push_back(std::make_unique<DecoderLayer>(
        params_, "decoder.layers." + std::to_string(i), shape, dropout_ids_));
    add_stage(stages, first);
  }
  if (!decoder_.empty()) {
    // The cross-attention keys and values of all layers as one group, laid out after the decoder
    // layers (in front of what was registered just before them): their gradients are final only
    // once the whole decoder stack's backward ran (CrossKeysValues::backward), so they are a stage
    // of their own, after the layers' in backward order.
    std::vector<const AttentionBlock*> cross;
    for (const auto& layer : decoder_) cross.push_back(&layer->cross_attention());
    cross_kv_ = std::make_unique<CrossKeysValues>(params_, cross,
                                                  &params_.params()[decoder_first_param - 1]);
    const std::vector<const Param*> kv = cross_kv_->params();
    for (size_t i = decoder_first_stage; i < stages.size(); ++i)
      std::erase_if(stages[i],
                    [&](const Param* p) { return std::find(kv.begin(), kv.end(), p) != kv.end(); });
    stages.insert(stages.begin() + static_cast<std::ptrdiff_t>(decoder_first_stage), kv);
  }
  if (shape.pre_norm) {
    first = params_.params().size();
    dec_norm_g_ = params_.add("decoder.layer_norm.weight", {d}, ParamKind::norm_gain);
    dec_norm_b_ = params_.add("decoder.layer_norm.bias", {d}, ParamKind::norm_bias);
    add_stage(stages, first);
  }
  first = params_.params().size();
  out_proj_ = shape.shared_embeddings
                  ? tgt_embed_
                  : params_.add("decoder.output_projection.weight", {v, d}, ParamKind::embedding);
  add_stage(stages, first);
  stages_.assign(stages.rbegin(), stages.rend());

  // Plan once (count), then allocate exactly that much and lay the same buffers out for real.
  Arena planner = Arena::planner(device);
  allocate(planner);
  try {
    arena_ = Arena(device, planner.used());
  } catch (const std::runtime_error& e) {
    // Out of memory: say what the plan holds and what makes it smaller.
    std::string message = std::string(e.what()) + " (the model's weights, activations and " +
                          "gradient buffers for " + std::to_string(max_rows) +
                          " padded tokens a side: a smaller train.batch_tokens plans less";
    if (queue_planned_)
      message +=
          "; NMT_QUEUE_LARGE_WEIGHT_GRADS=0, or NMT_QUEUE_WEIGHT_GRADS=0, plans without "
          "(some of) the weight-gradient queue's buffers, for slower steps";
    if (deferred_partials_.capacity > 0)
      message +=
          "; NMT_DEFER_PARTIAL_SUMS=0 plans without the deferred second passes' partial-sum buffer";
    throw std::runtime_error(message + ")");
  }
  allocate(arena_);
  deferred_sums_ = cuda::PartialSumDeferral(static_cast<float*>(deferred_partials_.data),
                                            deferred_partials_.capacity);
  // A stage reports its parameters from the end of its layout span to its start (the layout
  // reverses registration, and joined groups sit together): buckets then fill front to back.
  for (auto& stage : stages_)
    std::sort(stage.begin(), stage.end(),
              [](const Param* a, const Param* b) { return a->offset > b->offset; });
}

void Transformer::allocate(Arena& arena) {
  int64_t d = shape_.d_model, rows = max_rows_;
  DType act = shape_.compute_dtype;
  params_.finalize(arena, act);
  ws_.plan(arena, rows, d, shape_.ffn_dim, act);
  allocate_inputs(arena);
  // What only a GPU's backward reads besides the inputs: the deferred second passes' partial sums
  // (the LayerNorms', the attention bias sums').
  const bool gpu_training = plan_.training && arena.device() == Device::cuda;
  if (gpu_training && defer_partial_sums_switch.get()) {
    // Every LayerNorm backward of a step: two a encoder layer, three a decoder layer, and
    // pre-norm's two final norms. And the attention backwards' bias sums (one a self-attention,
    // one a cross-attention) for batches of up to rows / 16 sentences; a batch of more (shorter)
    // sentences runs those second passes at once.
    const int64_t norms =
        2 * shape_.encoder_layers + 3 * shape_.decoder_layers + (shape_.pre_norm ? 2 : 0);
    const int64_t attentions = shape_.encoder_layers + 2 * shape_.decoder_layers;
    const int64_t sentences = std::max<int64_t>(1, rows / 16);
    deferred_partials_ = arena.allocate(
        "deferred_partials", DType::f32,
        norms * cuda::layernorm_backward_partial_floats(rows, d, act) +
            attentions * attention_bias_partial_floats(shape_, arena.device(), sentences));
  }
  loss_sums_ = arena.allocate("loss_sums", DType::i32, kLossSumsWords);
  src_x0_ = arena.allocate("src_x0", act, rows * d);
  tgt_x0_ = arena.allocate("tgt_x0", act, rows * d);
  enc_final_ = arena.allocate("enc_final", act, rows * d);
  dec_final_ = arena.allocate("dec_final", act, rows * d);
  logits_ = arena.allocate("logits", act, rows * shape_.vocab);
  enc_mean_ = arena.allocate("enc_mean", DType::f32, rows);
  enc_rstd_ = arena.allocate("enc_rstd", DType::f32, rows);
  dec_mean_ = arena.allocate("dec_mean", DType::f32, rows);
  dec_rstd_ = arena.allocate("dec_rstd", DType::f32, rows);
  d_enc_ = arena.allocate("d_enc", act, rows * d);
  d_dec_ = arena.allocate("d_dec", act, rows * d);
  int64_t max_scores = rows * max_len_ * shape_.heads;
  const bool queue = plan_.training && plan_.queue_weight_grads && queue_weight_grads_switch.get();
  const QueuedGrads queued = !queue                                  ? QueuedGrads::none
                             : queue_large_weight_grads_switch.get() ? QueuedGrads::all
                                                                     : QueuedGrads::attention;
  queue_planned_ = queued != QueuedGrads::none;
  for (auto& layer : encoder_) layer->plan(arena, rows, max_scores, queued, plan_.training);
  // One GEMM for every layer's cross-attention keys and values where all of them run fused.
  const bool cross_kv_on =
      cross_kv_ && cross_kv_all_layers() && attention_runs_fused(shape_, arena.device());
  if (cross_kv_) cross_kv_->plan(arena, rows, act, cross_kv_on, plan_.training);
  for (auto& layer : decoder_)
    layer->plan(arena, rows, max_scores, cross_kv_on, queued, plan_.training);
}

void Transformer::add_stage(std::vector<std::vector<const Param*>>& stages, size_t first) {
  std::vector<const Param*> stage;
  for (size_t i = first; i < params_.params().size(); ++i) stage.push_back(&params_.params()[i]);
  stages.push_back(std::move(stage));  // may be empty (a shared table adds nothing)
}

void Transformer::stage_done(size_t stage) {
  if (!grad_ready_) return;
  const std::vector<const Param*>& done = stages_.at(stage);
  finished_.insert(finished_.end(), done.begin(), done.end());
  if (finished_.size() == reported_) return;  // nothing new to report
  const bool last = stage + 1 == stages_.size();
  if (last || !exchange_progress_ || !overlap_capture()) return report_pending();
  const int progress = exchange_progress_(finished_);
  if (progress <= reported_progress_) return;
  reported_progress_ = progress;
  report_pending();
}

void Transformer::report_pending() {
  // What is held back may belong to the pending parameters: their gradients are final only after.
  // (Passes are recorded only while backward defers them, so any recorded ones go out here.)
  if (!dw_queue_.empty()) dw_queue_.flush();
  if (deferred_sums_.recorded() > 0) deferred_sums_.flush(cuda::current_stream());
  // The hook as it is when `after` runs (a graph's replays run it at later steps).
  auto report = [this,
                 params = std::vector<const Param*>(
                     finished_.begin() + static_cast<std::ptrdiff_t>(reported_), finished_.end())] {
    for (const Param* p : params) grad_ready_(*p);
  };
  reported_ = finished_.size();
  (cut_ != nullptr ? *cut_ : TrainGraphs::run_now())(report);
}

int64_t Transformer::ffn_blocks_with_positive_bits() const {
  int64_t count = 0;
  for (const auto& layer : encoder_) count += layer->ffn().positive_bits_set() ? 1 : 0;
  for (const auto& layer : decoder_) count += layer->ffn().positive_bits_set() ? 1 : 0;
  return count;
}

void Transformer::zero_grads() {
  Tensor g = params_.grads();
  fill_zero(g);
}

Tensor Transformer::encode(const StepContext& ctx) {
  int64_t d = shape_.d_model, rows = batch_ * src_len_;
  embed_p_ = ctx.training ? shape_.dropout : 0.0f;
  src_embed_key_ = ctx.key(src_embed_dropout_);
  Tensor ids = src_ids_.view({rows}), lengths = src_lengths_.view({batch_});
  Tensor x = src_x0_.view({rows, d});
  embed(ids, *src_embed_, x, src_len_, EmbeddingDropout{embed_p_, src_embed_key_});
  // Pre-norm: each layer computes the LayerNorm above it (the next layer's first, or the final
  // norm) in its last residual pass.
  const NormInto final_into =
      into_final_norm(enc_norm_g_, enc_norm_b_, enc_final_, enc_mean_, enc_rstd_, rows);
  for (size_t i = 0; i < encoder_.size(); ++i) {
    const NormInto next = i + 1 < encoder_.size() ? encoder_[i + 1]->input_norm(rows) : final_into;
    x = encoder_[i]->forward(x, lengths, batch_, src_len_, ctx, shape_.pre_norm ? &next : nullptr,
                             i > 0);
  }
  enc_last_ = x;
  if (shape_.pre_norm && !encoder_.empty()) return final_into.y;
  return final_norm(x, enc_norm_g_, enc_norm_b_, enc_final_, enc_mean_, enc_rstd_);
}

NormInto Transformer::into_final_norm(const Param* gain, const Param* bias, const Buffer& out,
                                      const Buffer& mean, const Buffer& rstd, int64_t rows) const {
  if (!shape_.pre_norm) return NormInto{};
  return NormInto{gain, bias, out.view({rows, shape_.d_model}), mean.view({rows}),
                  rstd.view({rows})};
}

Tensor Transformer::decode(const Tensor& enc_out, const StepContext& ctx) {
  int64_t d = shape_.d_model, rows = batch_ * tgt_len_;
  tgt_embed_key_ = ctx.key(tgt_embed_dropout_);
  Tensor ids = tgt_in_.view({rows}), lengths = tgt_lengths_.view({batch_});
  Tensor src_lengths = src_lengths_.view({batch_});
  Tensor y = tgt_x0_.view({rows, d});
  embed(ids, *tgt_embed_, y, tgt_len_, EmbeddingDropout{embed_p_, tgt_embed_key_});
  const NormInto final_into =
      into_final_norm(dec_norm_g_, dec_norm_b_, dec_final_, dec_mean_, dec_rstd_, rows);
  const bool all_kv = cross_kv_all_layers_on();
  if (all_kv) cross_kv_->forward(enc_out);  // every layer's cross-attention keys and values
  for (size_t i = 0; i < decoder_.size(); ++i) {
    const NormInto next = i + 1 < decoder_.size() ? decoder_[i + 1]->input_norm(rows) : final_into;
    const ProjectedKeysValues kv =
        all_kv ? cross_kv_->layer(static_cast<int64_t>(i)) : ProjectedKeysValues{};
    y = decoder_[i]->forward(y, lengths, enc_out, src_lengths, batch_, tgt_len_, src_len_, ctx,
                             shape_.pre_norm ? &next : nullptr, i > 0, all_kv ? &kv : nullptr);
  }
  dec_last_ = y;
  if (shape_.pre_norm && !decoder_.empty()) return final_into.y;
  return final_norm(y, dec_norm_g_, dec_norm_b_, dec_final_, dec_mean_, dec_rstd_);
}

Tensor Transformer::final_norm(const Tensor& x, const Param* gain, const Param* bias,
                               const Buffer& out, const Buffer& mean, const Buffer& rstd) {
  if (!shape_.pre_norm) return x;
  const int64_t rows = x.dim(0);
  Tensor y = out.view({rows, shape_.d_model}), m = mean.view({rows}), r = rstd.view({rows});
  layernorm_forward(x, gain->compute, bias->compute, y, m, r, shape_.layernorm_eps);
  return y;
}

void Transformer::set_train_graphs(bool on) {
  if (!on || device_ != Device::cuda)
    graphs_.reset();
  else if (!graphs_)
    graphs_ = std::make_unique<TrainGraphs>();
}

LossSums Transformer::forward_backward(const Batch& batch, const StepContext& ctx,
                                       float label_smoothing, float loss_scale) {
  start_forward_backward(batch, ctx, label_smoothing, loss_scale);
  return loss_sums();
}

LossSums Transformer::loss_sums() {
  return read_loss_sums(loss_sums_.view({kLossSumsWords}), shape_.vocab);
}

void Transformer::start_forward_backward(const Batch& batch, const StepContext& ctx,
                                         float label_smoothing, float loss_scale) {
  if (!plan_.training)
    throw std::logic_error(
        "Transformer::forward_backward: the model was planned for decoding only");
  const StepContext step_ctx = upload_step(batch, ctx);
  auto step = [&](const TrainGraphs::Cut& cut) {
    cut_ = &cut;
    finished_.clear();
    reported_ = 0;
    reported_progress_ = 0;
    try {
      enqueue_forward_backward(step_ctx, label_smoothing, loss_scale);
    } catch (...) {
      cut_ = nullptr;
      throw;
    }
    cut_ = nullptr;
  };
  const bool hooked = static_cast<bool>(grad_ready_);
  if (graphs_ && (!hooked || overlap_capture())) {
    cuda::StreamHandoff handoff(graphs_->stream());
    graphs_->run(TrainStepKey{batch_, src_len_, tgt_len_, loss_scale, label_smoothing, ctx.seed,
                              ctx.training, embedding_fused(), row_orders_, hooked},
                 step);
  } else {
    if (graphs_) graphs_->count_overlapped();
    step(TrainGraphs::run_now());
  }
}

void Transformer::enqueue_forward_backward(const StepContext& ctx, float label_smoothing,
                                           float loss_scale) {
  Tensor enc_out = encode(ctx);
  Tensor dec_out = decode(enc_out, ctx);
  int64_t rows = batch_ * tgt_len_;
  Tensor logits = logits_.view({rows, shape_.vocab}), targets = tgt_out_.view({rows});
  Tensor no_bias, sums = loss_sums_.view({kLossSumsWords});
  linear_forward(dec_out, out_proj_->compute, no_bias, logits);
  // The loss is a sum over tokens (times the loss scale); d_logits overwrite the logits in place.
  cross_entropy_forward_backward_into(logits, targets, kPadId, label_smoothing, loss_scale, logits,
                                      sums);
  Tensor d_dec = d_dec_.view({rows, shape_.d_model});
  linear_backward(logits, dec_out, out_proj_->compute, d_dec, out_proj_->grad, no_bias);
  backward(d_dec);
}

void Transformer::backward(Tensor& d_dec) {
  int64_t d = shape_.d_model, t_rows = batch_ * tgt_len_, s_rows = batch_ * src_len_;
  // The queued weight gradients wait for the end of the encoder's backward,
  // unless the exchange takes each layer's gradients as backward finishes them.
  // Under a hook they are flushed wherever its stages are reported (report_pending).
  const bool keep_levers = !grad_ready_ || overlap_capture();
  dw_queue_.clear();
  dw_queue_.set_enabled(queue_planned_ && keep_levers);
  deferred_sums_.clear();
  const bool defer_sums = deferred_partials_.capacity > 0 && keep_levers;
  // Active from here to the flush below (reset there), so no LayerNorm after it is recorded.
  std::optional<cuda::DeferPartialSums> deferring(std::in_place,
                                                  defer_sums ? &deferred_sums_ : nullptr);
  ws_.dw_queue = &dw_queue_;
  size_t stage = 0;     // the stages of the constructor, in backward order
  stage_done(stage++);  // a separate output projection (its gradient came from the logits)
  // Pre-norm: the final norm's backward (in place) also writes the last layer's branch gradient,
  // and each layer the branch gradient of the layer below (Sublayer::backward).
  const bool pre = shape_.pre_norm;
  if (pre) {
    const BranchTail top = decoder_.empty() ? BranchTail{} : decoder_.back()->output_tail();
    final_norm_backward(d_dec, dec_last_, dec_norm_g_, dec_norm_b_, dec_mean_, dec_rstd_,
                        decoder_.empty() ? nullptr : &top);
    stage_done(stage++);
  }
  // The encoder output's gradient: each layer's cross-attention adds its keys' and values' paths,
  // or (all layers projected at once) one product writes their sum after the decoder stack.
  Tensor d_enc = d_enc_.view({s_rows, d});
  const bool all_kv = cross_kv_all_layers_on();
  if (!all_kv) fill_zero(d_enc);
  for (size_t i = decoder_.size(); i-- > 0;) {
    const BranchTail below = i > 0 ? decoder_[i - 1]->output_tail() : BranchTail{};
    decoder_[i]->backward(d_dec, d_enc, ws_, pre && i > 0 ? &below : nullptr, pre);
    stage_done(stage++);
  }
  if (cross_kv_) {
    if (all_kv) cross_kv_->backward(d_enc);
    stage_done(stage++);  // every layer's cross-attention k and v
  }
  embed_backward(tgt_in_.view({t_rows}), d_dec, *tgt_embed_,
                 EmbeddingDropout{embed_p_, tgt_embed_key_}, true);
  stage_done(stage++);  // a separate target embedding

  if (pre) {
    const BranchTail top = encoder_.empty() ? BranchTail{} : encoder_.back()->output_tail();
    final_norm_backward(d_enc, enc_last_, enc_norm_g_, enc_norm_b_, enc_mean_, enc_rstd_,
                        encoder_.empty() ? nullptr : &top);
    stage_done(stage++);
  }
  for (size_t i = encoder_.size(); i-- > 0;) {
    const BranchTail below = i > 0 ? encoder_[i - 1]->output_tail() : BranchTail{};
    encoder_[i]->backward(d_enc, ws_, pre && i > 0 ? &below : nullptr, pre);
    stage_done(stage++);
  }
  dw_queue_.flush();  // (a hook's stages above were reported only after a flush: report_pending)
  // Every LayerNorm's second pass (none recorded, and nothing launched, when not deferring).
  deferred_sums_.flush(defer_sums ? cuda::current_stream() : nullptr);
  deferring.reset();
  embed_backward(src_ids_.view({s_rows}), d_enc, *src_embed_,
                 EmbeddingDropout{embed_p_, src_embed_key_}, false);
  stage_done(stage++);  // the source embedding (the shared table's last contribution)
  if (stage != stages_.size())
    throw std::logic_error("Transformer::backward: stage count mismatch");
}

void Transformer::final_norm_backward(Tensor& grad, const Tensor& x, Param* gain, Param* bias,
                                      const Buffer& mean, const Buffer& rstd,
                                      const BranchTail* top) {
  const int64_t rows = grad.dim(0);
  Tensor m = mean.view({rows}), r = rstd.view({rows});
  if (top == nullptr) {
    layernorm_backward(grad, x, gain->compute, m, r, grad, gain->grad, bias->grad);  // in place
    return;
  }
  Tensor branch = top->into.empty() ? ws_.s1.view({rows, shape_.d_model}) : top->into;
  layernorm_backward_dropout_bias(grad, x, gain->compute, m, r, grad, gain->grad, bias->grad,
                                  branch, top->p, top->key, *top->f_bias_grad, top->keep_bits);
}

LossSums Transformer::evaluate(const Batch& batch, float label_smoothing) {
  StepContext ctx;
  ctx.training = false;
  upload(batch);
  Tensor enc_out = encode(ctx);
  Tensor dec_out = decode(enc_out, ctx);
  int64_t rows = batch_ * tgt_len_;
  Tensor logits = logits_.view({rows, shape_.vocab}), targets = tgt_out_.view({rows});
  Tensor no_bias, no_grad;
  linear_forward(dec_out, out_proj_->compute, no_bias, logits);
  return cross_entropy_forward_backward(logits, targets, kPadId, label_smoothing, 1.0f, no_grad);
}

}  // namespace nmt
