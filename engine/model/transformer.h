// Transformer: the encoder-decoder graph, built once from a ModelShape, with its activation memory
// planned once for the largest batch (no allocation inside a step). Forward and backward are
// written out in order in transformer.cpp; decoding's entry points in transformer_decoding.cpp.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "data/batch.h"
#include "engine/model/arena.h"
#include "engine/model/cross_keys_values.h"
#include "engine/model/model_shape.h"
#include "engine/model/param_store.h"
#include "engine/model/train_graphs.h"
#include "engine/model/transformer_layers.h"
#include "engine/model/workspace.h"
#include "kernels/cross_entropy.h"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/upload_staging.h"
#include "kernels/embedding.h"

namespace nmt {

// The rows to plan a model for: `token_budget` padded tokens per side of a batch
// (train.batch_tokens, or decoding's step_rows), and never fewer than one `widest` unit (the widest
// padded pair in training, one sentence's beam at the longest length in decoding), so every batch
// holds one.
inline int64_t planned_rows(int64_t token_budget, int64_t widest) {
  return token_budget > widest ? token_budget : widest;
}

// Whether models built from now on hold weight-gradient products back to the end of backward and
// run them as batched launches (engine/model/weight_grad_queue.h): the attention blocks' d x d ones
// (out projections, cross-attention's q) and, with the second switch, self-attention's joined
// q | k | v and the feed-forward fc1 and fc2 ones too. Their operands get buffers of their own: on
// Transformer-base at 8192 rows in bf16, 192 MiB for the first kind and 768 MiB more for the second
// (an H100: base steps 9.37 -> 9.18 -> 8.80 ms, docs/perf.md session 14). Both on by default;
// NMT_QUEUE_WEIGHT_GRADS=0 / NMT_QUEUE_LARGE_WEIGHT_GRADS=0 in the environment, or the setters,
// turn them off (a model reads them when it plans its memory, in its constructor). The gradients
// are the same bits on the CPU; on the GPU the batch kernel's summation order moves the queued
// ones' last bits.
void set_queue_weight_grads(bool on);
void set_queue_large_weight_grads(bool on);
bool queue_weight_grads();
bool queue_large_weight_grads();

// Whether models built from now on hold their LayerNorms' second passes (the parameter and
// branch-bias gradients' ordered sums, kernels/cuda/reduce.h PartialSumDeferral) and the
// short-sentence attention backward's q, k, v bias sums back to the end of a GPU backward and run
// them in one launch, with the same bits. Its buffer holds every LayerNorm's partial sums and the
// attention blocks' for batches of up to rows / 16 sentences (about 100 + 54 MiB on
// Transformer-base at 8192 rows). On by default;
// NMT_DEFER_PARTIAL_SUMS=0 or the setter turns it off (read when the model plans). Off while a
// grad-ready hook is set.
void set_defer_partial_sums(bool on);
bool defer_partial_sums();

// Whether a step with a grad-ready hook (the exchange overlapping backward) keeps the step's other
// levers: its CUDA graph cut where a reported gradient starts an exchange bucket
// (engine/model/train_graphs.h), the queued weight gradients and deferred second passes on and
// flushed at those points. Off, such a step runs op by op, with neither, and reports each stage
// at once (the exchange as before). On by default; NMT_OVERLAP_CAPTURE=0 or the setter turns it
// off (read at every step).
void set_overlap_capture(bool on);
bool overlap_capture();

// Whether the embeddings' dropout runs inside the embedding ops, and a GPU step takes its
// embeddings' backward row order from the batch (data/batch.h add_row_orders) instead of sorting
// on the device. On by default; NMT_EMBEDDING_FUSED=0 or the setter turns both off (read at every
// step). The same bits either way.
void set_embedding_fused(bool on);
bool embedding_fused();

// What a model plans memory for beyond forward.
struct ModelPlan {
  // Backward's own buffers (the weight-gradient queue's operands, the all-layer cross keys' and
  // values' gradient); false for a model that only decodes or scores.
  bool training = true;
  // The weight-gradient queue's buffers, where the switches above leave it on: a trainer whose
  // every backward has a grad-ready hook (the overlapped exchange, one micro-batch a step) says
  // false.
  bool queue_weight_grads = true;
};

class Transformer {
 public:
  // max_rows: the most padded tokens of one side of a batch (sentences * padded length), see
  // planned_rows; max_len: the longest padded sentence of either side.
  Transformer(const ModelShape& shape, Device device, int64_t max_rows, int64_t max_len,
              ModelPlan plan = {});

  const ModelShape& shape() const { return shape_; }
  ParamStore& params() { return params_; }
  Device device() const { return device_; }
  int64_t max_rows() const { return max_rows_; }
  int64_t max_len() const { return max_len_; }
  size_t arena_bytes() const { return arena_.capacity(); }

  // Training: forward, loss, backward. Parameter gradients are accumulated (+=) unnormalised
  // (the loss is a sum over target tokens; the optimizer divides by the global token count).
  // loss_scale multiplies the loss before backward (fp16 loss scaling): the gradients come out
  // scaled by it, the returned sums do not. A target outside the vocabulary throws
  // std::invalid_argument when the sums are read, after backward ran (the step enqueues its whole
  // backward before it reads anything back): zero the gradients before using the model again.
  // A model planned without training (ModelPlan) throws std::logic_error.
  LossSums forward_backward(const Batch& batch, const StepContext& ctx, float label_smoothing,
                            float loss_scale = 1.0f);
  // forward_backward in two halves: the step enqueued (on the GPU it returns before it has run, so
  // the caller can enqueue the optimizer behind it), and its loss sums read back (synchronising
  // the current stream; a bad target throws here). The next step's start overwrites the sums.
  void start_forward_backward(const Batch& batch, const StepContext& ctx, float label_smoothing,
                              float loss_scale = 1.0f);
  LossSums loss_sums();
  // Loss only, no gradients (dropout off).
  LossSums evaluate(const Batch& batch, float label_smoothing);

  // On the GPU, whether forward_backward replays its steps from CUDA graphs, one per batch shape
  // (engine/model/train_graphs.h; train.cuda_graphs). Off by default, and on the CPU always. A step
  // with a grad-ready hook set (the exchange overlapping backward) runs op by op.
  void set_train_graphs(bool on);
  // What the graphs did so far, or nullptr when they are off.
  const TrainGraphStats* train_graph_stats() const { return graphs_ ? &graphs_->stats() : nullptr; }

  // How many second passes (the LayerNorms', the attention bias sums') the last backward run op by
  // op held back to its end (0: none deferred; a step replayed from a graph leaves the count of
  // the step it was captured in).
  int64_t deferred_partial_sums() const { return deferred_sums_.last_flushed(); }
  // How many feed-forward blocks' last forward stored the positive bits their backward reads
  // (engine/model/feed_forward_block.h ffn_positive_bits).
  int64_t ffn_blocks_with_positive_bits() const;
  // How many weight-gradient products the last backward held back and ran together at its end
  // (engine/model/weight_grad_queue.h; 0 where the queue was off).
  int64_t queued_weight_grads() const { return dw_queue_.last_flushed(); }

  // Zero every parameter gradient.
  void zero_grads();

  // Called during forward_backward's backward for each parameter as soon as its gradient is final
  // for this batch (its kernels enqueued), in the order backward finishes them: the data-parallel
  // exchange starts buckets from it while backward goes on. Unset (the default) calls nothing.
  // `progress` (optional, used where overlap_capture()): how far the exchange could go with these
  // parameters finished this step (the data-parallel exchange: how many of its buckets, from the
  // front, they complete). A function of its argument alone, so that a capture, which calls no
  // hook, asks what the op-by-op step asks. Backward holds finished stages back and reports them
  // together where the progress grows (and at the end), after flushing the queued weight
  // gradients and deferred sums; a graphed step is cut only there. Without it every stage is
  // reported (and flushed, and cut) as it finishes.
  using GradReadyHook = std::function<void(const Param&)>;
  using ExchangeProgress = std::function<int(const std::vector<const Param*>& finished)>;
  void set_grad_ready_hook(GradReadyHook hook, ExchangeProgress progress = nullptr) {
    grad_ready_ = std::move(hook);
    exchange_progress_ = grad_ready_ ? std::move(progress) : nullptr;
  }

  // Decoding entry points (beam search, engine/decode/; nmt-score), in transformer_decoding.cpp.
  // All run without dropout and return views into the model's arena, valid until the next call.
  // The encoder over batch's sources only (targets ignored): [sentences * src_len, d_model].
  Tensor encode_sources(const Batch& batch);
  // One decoder pass over `rows` prefixes of equal length (kBosId first), each attending to its own
  // copy of a source: returns the logits of every prefix's last position, [rows, vocab].
  Tensor decode_last_logits(const Tensor& memory,  // [rows * memory_len, d_model] encoder output
                            const std::vector<int32_t>& memory_lengths,  // [rows] real tokens
                            int64_t memory_len,
                            const std::vector<int32_t>& prefixes,  // [rows, prefix_len] ids
                            int64_t rows, int64_t prefix_len);
  // Decoding one position per row through the same decoder layers, over caches the caller owns
  // (one per decoder layer, engine/decode/incremental_decoder.h). cache_sources writes every
  // layer's cross-attention keys and values of memory, [sources * src_len, d_model].
  void cache_sources(const Tensor& memory, std::vector<DecoderLayerCache>& caches);
  // ids: [rows] i32 on the model's device, rows <= max_rows(), row r's token at positions[r]
  // (positions: [rows] i32 on the model's device, read there: a step captured into a CUDA graph
  // replays at any position); its keys and values join caches[i].self. Returns the next token's
  // logits, [rows, vocab]. Enqueues device work only: no host read, no allocation, no sync.
  Tensor decode_step(const Tensor& ids, const Tensor& positions,
                     std::vector<DecoderLayerCache>& caches);

 private:
  void upload(const Batch& batch);
  // Checks that the batch fits the plan and takes its shape (batch_, src_len_, tgt_len_).
  void take_shape(const Batch& batch);
  // A training step's inputs: upload, upload_row_orders and with_step_on_device in one; on the GPU
  // through staging_ (copies enqueued behind the work before them, no host wait).
  StepContext upload_step(const Batch& batch, const StepContext& ctx);
  // Writes ctx.step where the GPU's dropout kernels read it and returns ctx pointing there (the
  // CPU: ctx as it is).
  StepContext with_step_on_device(const StepContext& ctx);
  // ctx pointing at the step number in step_ (uploaded there already).
  StepContext on_device_step(const StepContext& ctx) const;
  // forward_backward's work after the upload, enqueued only: the loss sums go to loss_sums_.
  void enqueue_forward_backward(const StepContext& ctx, float label_smoothing, float loss_scale);
  Tensor encode(const StepContext& ctx);
  Tensor decode(const Tensor& enc_out, const StepContext& ctx);
  // Pre-norm's final layer norm of a stack's output x [rows, d_model] into out; post-norm: x.
  Tensor final_norm(const Tensor& x, const Param* gain, const Param* bias, const Buffer& out,
                    const Buffer& mean, const Buffer& rstd);
  void backward(Tensor& d_dec_out);
  // Pre-norm: the final norm as the last layer's `next` (views for `rows` rows); post-norm: none.
  NormInto into_final_norm(const Param* gain, const Param* bias, const Buffer& out,
                           const Buffer& mean, const Buffer& rstd, int64_t rows) const;
  // Pre-norm's final norm backward, in place in grad [rows, d_model] (x: its input); with `top`
  // (the stack's last layer's tail) its branch gradient is written in the same pass (ws_.s1).
  void final_norm_backward(Tensor& grad, const Tensor& x, Param* gain, Param* bias,
                           const Buffer& mean, const Buffer& rstd, const BranchTail* top);
  void allocate(Arena& arena);
  // The inputs' parts of inputs_, and staging_ for a GPU training model (transformer_inputs.cpp).
  void allocate_inputs(Arena& arena);
  // The source's or target's embedding (ids [rows], out / d_out [rows, d_model]) with its dropout,
  // fused unless NMT_EMBEDDING_FUSED=0; the backward accumulates into table.grad.
  void embed(const Tensor& ids, const Param& table, Tensor& out, int64_t seq_len,
             const EmbeddingDropout& dropout) const;
  void embed_backward(const Tensor& ids, Tensor& d_out, Param& table,
                      const EmbeddingDropout& dropout, bool target) const;
  // Uploads the batch's row orders where the GPU's backward can use them (sets row_orders_).
  void upload_row_orders(const Batch& batch);
  // Whether the GPU's backward uses the batch's row orders (sets row_orders_).
  bool take_row_orders(const Batch& batch);
  EmbeddingRowOrder row_order(bool target) const;  // in row_orders_buffer_
  // The parameters registered since `first` (an index into params_), as one backward stage.
  void add_stage(std::vector<std::vector<const Param*>>& stages, size_t first);
  // A backward stage has finished: under a grad-ready hook its parameters join finished_, and
  // report_pending() hands over those not reported yet where exchange_progress_ grows (or at the
  // last stage).
  void stage_done(size_t stage);
  void report_pending();
  // Whether the model was planned to project every decoder layer's cross keys and values at once.
  bool cross_kv_all_layers_on() const { return cross_kv_ && cross_kv_->on(); }

  ModelShape shape_;
  Device device_;
  ModelPlan plan_;
  int64_t max_rows_, max_len_;
  ParamStore params_;
  DropoutIds dropout_ids_;
  Param* src_embed_ = nullptr;                           // [vocab, d_model]
  Param* tgt_embed_ = nullptr;                           // same as src_embed_ when shared
  Param* out_proj_ = nullptr;                            // same as tgt_embed_ when shared
  Param *enc_norm_g_ = nullptr, *enc_norm_b_ = nullptr;  // pre-norm final norms
  Param *dec_norm_g_ = nullptr, *dec_norm_b_ = nullptr;
  uint32_t src_embed_dropout_ = 0, tgt_embed_dropout_ = 0;
  std::vector<std::unique_ptr<EncoderLayer>> encoder_;
  std::vector<std::unique_ptr<DecoderLayer>> decoder_;
  // Every decoder layer's cross-attention keys and values in one GEMM (null without decoder
  // layers).
  std::unique_ptr<CrossKeysValues> cross_kv_;
  // Parameters whose gradients backward finishes together, in backward order (see transformer.cpp).
  std::vector<std::vector<const Param*>> stages_;
  GradReadyHook grad_ready_;
  ExchangeProgress exchange_progress_;
  // Under a hook: the parameters finished this step in backward order, how many of them are
  // reported, and the progress at the last report; the running step's Cut (TrainGraphs; run now
  // when op by op).
  std::vector<const Param*> finished_;
  size_t reported_ = 0;
  int reported_progress_ = 0;
  const TrainGraphs::Cut* cut_ = nullptr;
  std::unique_ptr<TrainGraphs> graphs_;  // set_train_graphs(true) on the GPU

  Arena arena_;
  Workspace ws_;
  // The weight-gradient products held back to the end of backward
  // (weight_grad_queue.h) where queue_planned_ (their operands have buffers of their own) and no
  // grad-ready hook reads a layer's gradients earlier. NMT_QUEUE_WEIGHT_GRADS=0 plans without it.
  WeightGradQueue dw_queue_;
  bool queue_planned_ = false;
  // The LayerNorms' and the attention bias sums' second passes held back to the end of backward
  // (set_defer_partial_sums), with their partial sums in deferred_partials_ (planned for a CUDA
  // training model only).
  Buffer deferred_partials_;
  cuda::PartialSumDeferral deferred_sums_;
  // Inputs, each a part of inputs_ (a GPU training step uploads them through staging_, which
  // mirrors its layout): [rows] i32 ids, [batch] i32 lengths.
  Buffer inputs_;
  std::unique_ptr<cuda::UploadStaging> staging_;  // GPU training only: [inputs_ bytes] pinned
  Buffer src_ids_, tgt_in_, tgt_out_, src_lengths_, tgt_lengths_;
  Buffer step_;       // [2] i32: the step as a u64 (StepContext::step_on_device)
  // GPU training only: [4, rows] i32, the source's then the target's EmbeddingRowOrder (keys, then
  // rows) of the batch of the last forward_backward, uploaded when row_orders_ (the GPU, the batch
  // has them: data/batch.h add_row_orders).
  Buffer row_orders_buffer_;
  bool row_orders_ = false;
  Buffer loss_sums_;  // [kLossSumsWords] i32: cross_entropy_forward_backward_into's sums
  // Activations: [rows, d_model] (embeddings, final norms), [rows, vocab] logits.
  Buffer src_x0_, tgt_x0_, enc_final_, dec_final_, logits_;
  Buffer enc_mean_, enc_rstd_, dec_mean_, dec_rstd_;  // [rows] f32
  Buffer d_enc_, d_dec_;                              // [rows, d_model] gradients
  // What the current batch looks like.
  int64_t batch_ = 0, src_len_ = 0, tgt_len_ = 0;
  Tensor enc_last_, dec_last_;  // last layer outputs (inputs of the pre-norm final norms)
  RngKey src_embed_key_, tgt_embed_key_;
  float embed_p_ = 0;
};

}  // namespace nmt
