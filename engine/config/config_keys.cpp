// The config schema table: every `section.key` with its RunConfig field, range or allowed values
// and doc line, and the enum spellings. Defaults come from RunConfig itself.
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/config/config_schema.h"

namespace nmt {
namespace {

template <typename Enum>
using EnumNames = std::vector<std::pair<std::string, Enum>>;

const EnumNames<NormPosition> kNormNames = {{"post", NormPosition::post},
                                            {"pre", NormPosition::pre}};
const EnumNames<InitScheme> kInitNames = {{"xavier", InitScheme::xavier},
                                          {"torch", InitScheme::torch},
                                          {"torch_copies", InitScheme::torch_copies},
                                          {"fairseq", InitScheme::fairseq},
                                          {"scaled", InitScheme::scaled},
                                          {"small", InitScheme::small},
                                          {"deepnet", InitScheme::deepnet}};
const EnumNames<LengthPolicy> kLengthPolicyNames = {{"drop", LengthPolicy::kDrop},
                                                    {"truncate", LengthPolicy::kTruncate}};
const EnumNames<OptimizerKind> kOptimizerNames = {{"adam", OptimizerKind::adam},
                                                  {"lazyadam", OptimizerKind::lazyadam}};
const EnumNames<LrPolicy> kLrPolicyNames = {{"transformer_policy", LrPolicy::transformer_policy},
                                            {"inverse_sqrt", LrPolicy::inverse_sqrt},
                                            {"constant", LrPolicy::constant},
                                            {"cosine", LrPolicy::cosine},
                                            {"linear", LrPolicy::linear}};
const EnumNames<Device> kDeviceNames = {{"cpu", Device::cpu}, {"cuda", Device::cuda}};
constexpr std::string_view kAutoDevice = "auto";  // train.device unset: what the machine has
// DType also has i32, which is no compute or all-reduce precision: it has no spelling here.
const EnumNames<DType> kFloatDTypeNames = {
    {"fp32", DType::f32}, {"bf16", DType::bf16}, {"fp16", DType::f16}};

template <typename Enum>
std::string_view name_of(const EnumNames<Enum>& names, Enum value) {
  for (const auto& [name, entry] : names) {
    if (entry == value) return name;
  }
  return "?";
}

KeyRange closed(double min, double max) {
  return {min, max, false, false};
}
KeyRange at_least(double min) {
  return {.min = min};
}
KeyRange above_to(double min, double max) {
  return {min, max, true, false};
}  // (min, max]
KeyRange unit_interval_open() {
  return {0.0, 1.0, false, true};
}  // [0, 1)

// The part of a ConfigKey every type shares: path, doc and the getter/setter of one field.
template <typename Section, typename Field>
ConfigKey field_key(std::string_view path, Section RunConfig::*section, Field Section::*field,
                    KeyType type, std::string doc) {
  ConfigKey key;
  const size_t dot = path.find('.');
  key.section = std::string(path.substr(0, dot));
  key.name = std::string(path.substr(dot + 1));
  key.type = type;
  key.doc = std::move(doc);
  key.get = [section, field](const RunConfig& cfg) { return nlohmann::json(cfg.*section.*field); };
  key.set = [section, field](RunConfig& cfg, const nlohmann::json& value) {
    cfg.*section.*field = value.get<Field>();
  };
  return key;
}

// A bool or string key.
template <typename Section, typename Field>
ConfigKey key(std::string_view path, Section RunConfig::*section, Field Section::*field,
              std::string doc) {
  static_assert(std::is_same_v<Field, bool> || std::is_same_v<Field, std::string>);
  const KeyType type = std::is_same_v<Field, bool> ? KeyType::boolean : KeyType::string;
  return field_key(path, section, field, type, std::move(doc));
}

// An int64_t or double key with its allowed range.
template <typename Section, typename Field>
ConfigKey key(std::string_view path, Section RunConfig::*section, Field Section::*field,
              KeyRange range, std::string doc) {
  static_assert(std::is_same_v<Field, int64_t> || std::is_same_v<Field, double>);
  const KeyType type = std::is_same_v<Field, int64_t> ? KeyType::integer : KeyType::number;
  ConfigKey result = field_key(path, section, field, type, std::move(doc));
  result.range = range;
  return result;
}

// An enum key, spelled in the config as one of `names`.
template <typename Section, typename Enum>
ConfigKey key(std::string_view path, Section RunConfig::*section, Enum Section::*field,
              const EnumNames<Enum>& names, std::string doc) {
  ConfigKey result = field_key(path, section, field, KeyType::choice, std::move(doc));
  for (const auto& entry : names) result.choices.push_back(entry.first);
  result.get = [section, field, &names](const RunConfig& cfg) {
    return nlohmann::json(std::string(name_of(names, cfg.*section.*field)));
  };
  result.set = [section, field, &names](RunConfig& cfg, const nlohmann::json& value) {
    for (const auto& [name, entry] : names) {
      if (name == value.get<std::string>()) cfg.*section.*field = entry;
    }
  };
  return result;
}

// train.device: `auto` (an empty optional) or one of the devices.
ConfigKey device_key(std::string doc) {
  ConfigKey result;
  result.section = "train";
  result.name = "device";
  result.type = KeyType::choice;
  result.doc = std::move(doc);
  result.choices.emplace_back(kAutoDevice);
  for (const auto& entry : kDeviceNames) result.choices.push_back(entry.first);
  result.get = [](const RunConfig& cfg) {
    const std::optional<Device>& device = cfg.train.device;
    return nlohmann::json(std::string(device ? name_of(kDeviceNames, *device) : kAutoDevice));
  };
  result.set = [](RunConfig& cfg, const nlohmann::json& value) {
    cfg.train.device.reset();
    for (const auto& [name, entry] : kDeviceNames) {
      if (name == value.get<std::string>()) cfg.train.device = entry;
    }
  };
  return result;
}

std::vector<ConfigKey> build_keys() {
  constexpr auto kModel = &RunConfig::model;
  constexpr auto kData = &RunConfig::data;
  constexpr auto kTrain = &RunConfig::train;
  constexpr auto kOpt = &RunConfig::optimizer;
  constexpr auto kLr = &RunConfig::lr_schedule;
  constexpr auto kEval = &RunConfig::eval;
  constexpr auto kCkpt = &RunConfig::checkpoint;
  constexpr auto kLog = &RunConfig::log;
  constexpr auto kDist = &RunConfig::dist;
  using M = ModelConfig;
  using D = DataConfig;
  using T = TrainConfig;
  using O = OptimizerConfig;
  using L = LrScheduleConfig;
  using E = EvalConfig;
  using C = CheckpointConfig;
  using G = LogConfig;
  using P = DistConfig;
  return {
      key("model.encoder_layers", kModel, &M::encoder_layers, closed(1, 64),
          "Encoder layers (OpenSeq2Seq: encoder_params.encoder_layers)."),
      key("model.decoder_layers", kModel, &M::decoder_layers, closed(1, 64),
          "Decoder layers (OpenSeq2Seq: decoder_params.num_hidden_layers)."),
      key("model.d_model", kModel, &M::d_model, closed(8, 65536),
          "Model width: embeddings, attention and the residual stream (OpenSeq2Seq: hidden_size)."),
      key("model.num_heads", kModel, &M::num_heads, closed(1, 1024),
          "Attention heads; model.d_model must be divisible by it (OpenSeq2Seq: num_heads)."),
      key("model.ffn_dim", kModel, &M::ffn_dim, closed(1, 262144),
          "Inner width of the feed-forward blocks (OpenSeq2Seq: filter_size)."),
      key("model.dropout", kModel, &M::dropout, unit_interval_open(),
          "Dropout on the embeddings and on every residual branch before its add "
          "(OpenSeq2Seq: layer_postprocess_dropout)."),
      key("model.attention_dropout", kModel, &M::attention_dropout, unit_interval_open(),
          "Dropout on the attention probabilities (OpenSeq2Seq: attention_dropout)."),
      key("model.relu_dropout", kModel, &M::relu_dropout, unit_interval_open(),
          "Dropout after the ReLU inside the feed-forward blocks (OpenSeq2Seq: relu_dropout)."),
      key("model.norm", kModel, &M::norm, kNormNames,
          "Layer-norm placement: post = after each residual add (the paper), pre = before each "
          "sublayer plus a final norm per stack."),
      key("model.shared_embeddings", kModel, &M::shared_embeddings,
          "One table for source embedding, target embedding and output projection (needs a joint "
          "vocabulary)."),
      key("model.layernorm_eps", kModel, &M::layernorm_eps, above_to(0, 0.1),
          "Epsilon added to the variance in every layer norm."),
      key("model.max_positions", kModel, &M::max_positions, closed(1, 1048576),
          "Longest sequence the sinusoidal position encoding is built for; dev evaluation cuts "
          "longer sources to it (counted) and ends translations there."),
      key("model.init", kModel, &M::init, kInitNames,
          "Initialisation of the attention and feed-forward projections (embeddings are always "
          "N(0, d^-1/2), layer norms 1/0): xavier = Xavier-uniform per projection, biases 0; "
          "torch = PyTorch's nn.TransformerEncoderLayer defaults (q/k/v Xavier-uniform as one "
          "[3d, d] matrix, output and feed-forward U(+-1/sqrt(fan_in)), feed-forward biases too), "
          "each layer drawn on its own; torch_copies = the same, with every layer of a stack "
          "starting as a copy of its first (as nn.TransformerEncoder/Decoder build it); "
          "fairseq = q/k/v Xavier-uniform with gain 1/sqrt(2), the rest Xavier-uniform; scaled = "
          "torch with the attention-output and fc2 weights divided by sqrt(residual branches of "
          "the stack) (GPT-2); small = N(0, sqrt(2/(5 d))) with N(0, 2/(layers sqrt(d))) on those "
          "branch outputs (SmallInit + Wang); deepnet = Xavier-normal with DeepNet's "
          "encoder-decoder gain beta on v, out, fc1, fc2. docs/perf.md has the study."),

      key("data.train", kData, &D::train,
          "Training data: `synthetic:reverse` (a generated toy task) or a directory written by "
          "nmt-prep."),
      key("data.dev", kData, &D::dev,
          "Dev data: a directory written by nmt-prep; empty = none (a synthetic task makes its "
          "own)."),
      key("data.max_src_len", kData, &D::max_src_len, closed(1, 65536),
          "Longest source sentence in tokens; longer training pairs follow data.length_policy "
          "(dev lines are all decoded and scored; OpenSeq2Seq: max_length)."),
      key("data.max_tgt_len", kData, &D::max_tgt_len, closed(1, 65536),
          "Longest target sentence in tokens, without BOS/EOS; longer pairs follow "
          "data.length_policy."),
      key("data.length_policy", kData, &D::length_policy, kLengthPolicyNames,
          "Training pairs over a length limit: drop = skip them (counted and reported), truncate "
          "= cut them to the limit."),
      key("data.synthetic_vocab", kData, &D::synthetic_vocab, closed(2, 1000000),
          "Regular symbols of a synthetic task (the special ids PAD, UNK, BOS, EOS come on top)."),
      key("data.synthetic_min_len", kData, &D::synthetic_min_len, closed(1, 65536),
          "Shortest synthetic sequence, in symbols."),
      key("data.synthetic_max_len", kData, &D::synthetic_max_len, closed(1, 65536),
          "Longest synthetic sequence, in symbols."),
      key("data.synthetic_train_pairs", kData, &D::synthetic_train_pairs, closed(1, 1e9),
          "Synthetic training pairs, generated from train.seed."),
      key("data.synthetic_dev_pairs", kData, &D::synthetic_dev_pairs, closed(1, 1e7),
          "Synthetic dev pairs, generated from a stream apart from the training pairs."),

      key("train.max_steps", kTrain, &T::max_steps, closed(1, 1e12),
          "Optimizer updates to run (OpenSeq2Seq: max_steps)."),
      key("train.batch_tokens", kTrain, &T::batch_tokens, closed(1, 1e8),
          "Token budget of one micro-batch on one GPU (padded tokens; OpenSeq2Seq's "
          "batch_size_per_gpu counts sentences instead)."),
      key("train.max_sentences", kTrain, &T::max_sentences, closed(0, 1e7),
          "Most sentence pairs in one micro-batch; 0 = no cap."),
      key("train.bucket_window", kTrain, &T::bucket_window, closed(1, 1e6),
          "Length bucketing: pairs are sorted by length within windows of about this many batches, "
          "then batches are shuffled."),
      key("train.update_freq", kTrain, &T::update_freq, closed(1, 4096),
          "Micro-batches accumulated per optimizer update (OpenSeq2Seq: iter_size)."),
      key("train.seed", kTrain, &T::seed, closed(0, 4294967295.0),
          "Seed of everything random: initialisation, dropout masks, batch order, synthetic data."),
      device_key("Compute device: auto (cuda when a GPU is visible, else cpu; start-up says "
                 "which), cpu (the fp32 reference backend) or cuda (an error without a GPU)."),
      key("train.precision", kTrain, &T::precision, kFloatDTypeNames,
          "Compute dtype; master weights and optimizer state stay fp32, fp16 adds dynamic loss "
          "scaling (OpenSeq2Seq: dtype, \"mixed\" = fp16). The cpu device computes in fp32: there "
          "bf16 and fp16 fall back to fp32, with a note at start-up."),
      key("train.loss_scale", kTrain, &T::loss_scale, closed(1, 16777216),
          "fp16 only: the initial dynamic loss scale; it halves (and the step is skipped) on an "
          "inf/NaN gradient and doubles after train.loss_scale_window clean steps."),
      key("train.loss_scale_window", kTrain, &T::loss_scale_window, closed(1, 1e9),
          "fp16 only: clean steps before the loss scale doubles."),
      key("train.max_bad_steps", kTrain, &T::max_bad_steps, closed(0, 1e9),
          "Stop with an error after this many consecutive steps with a non-finite loss or "
          "gradient norm (skipped steps: a diverged run); 0 = never stop."),
      key("train.max_time", kTrain, &T::max_time,
          "Wall-clock limit of the run from process start: seconds (\"5400\"), \"H:MM:SS\" or "
          "\"D-HH:MM:SS\" (SLURM's --time forms); before it, the run saves a checkpoint and stops "
          "(exit 0, continue with --resume), leaving time for the save; \"\" = no limit."),
      key("train.gemm_autotune", kTrain, &T::gemm_autotune,
          "GPU only: at each matrix-product shape's first use, time the algorithms cuBLASLt "
          "lists and keep the fastest. Measured at one fixed batch shape (bench-step, H100): "
          "about 1.5% a Transformer-base step, nothing on big; each new batch shape costs a "
          "tuning of its products (with a host sync), so token batching with many shapes may "
          "lose more than it gains. Off, the default, every process picks the same algorithms "
          "and a resumed run repeats the uninterrupted one bit for bit; on, two processes may "
          "pick differently and differ in the last bits. NMT_GEMM_AUTOTUNE=1 in the "
          "environment turns it on for any tool."),
      key("train.cuda_graphs", kTrain, &T::cuda_graphs,
          "GPU only: capture each batch shape's forward and backward into a CUDA graph right "
          "behind the shape's first (op-by-op) step, while the device runs it, and replay it "
          "after (one launch instead of ~430; the same bits; NMT_CAPTURE_AT_FIRST_SIGHT=0: "
          "captured at the shape's second step). "
          "Steps whose gradient exchange overlaps backward (several ranks, dist.overlap) replay "
          "as graph segments cut where a bucket's all-reduce starts (NMT_OVERLAP_CAPTURE=0: op "
          "by op). A capture that fails turns graphs off for the run, with a note at its end."),
      key("train.label_smoothing", kTrain, &T::label_smoothing, unit_interval_open(),
          "Label smoothing of the cross-entropy loss (OpenSeq2Seq: loss_params.label_smoothing)."),
      key("train.clip_norm", kTrain, &T::clip_norm, at_least(0),
          "Clip the global gradient norm to this value; 0 = no clipping."),
      key("train.threads", kTrain, &T::threads, closed(0, 4096),
          "CPU threads (OpenMP) for the cpu device and data work; 0 = all cores."),

      key("optimizer.name", kOpt, &O::name, kOptimizerNames,
          "adam, or lazyadam: Adam that updates only the embedding rows a batch used "
          "(OpenSeq2Seq: LazyAdamOptimizer)."),
      key("optimizer.beta1", kOpt, &O::beta1, unit_interval_open(),
          "Adam decay of the first moment (OpenSeq2Seq: optimizer_params.beta1)."),
      key("optimizer.beta2", kOpt, &O::beta2, unit_interval_open(),
          "Adam decay of the second moment (OpenSeq2Seq: optimizer_params.beta2)."),
      key("optimizer.epsilon", kOpt, &O::epsilon, above_to(0, 1),
          "Adam epsilon (OpenSeq2Seq: optimizer_params.epsilon)."),
      key("optimizer.weight_decay", kOpt, &O::weight_decay, closed(0, 1),
          "Decoupled weight decay (AdamW), scaled by the learning rate; 0 = off."),

      key("lr_schedule.policy", kLr, &L::policy, kLrPolicyNames,
          "transformer_policy: `learning_rate * d_model^-0.5 * min(step^-0.5, step * "
          "warmup^-1.5)`; inverse_sqrt: linear warmup from warmup_init_lr to learning_rate, then "
          "`learning_rate * sqrt(warmup / step)`; constant: learning_rate after the same linear "
          "warmup; cosine and linear: the same warmup, then from learning_rate down to final_lr "
          "at decay_steps along half a cosine or a straight line, final_lr after (fairseq's "
          "cosine and polynomial_decay; OpenSeq2Seq: lr_policy)."),
      key("lr_schedule.learning_rate", kLr, &L::learning_rate, above_to(0, 1000),
          "transformer_policy: the multiplier (OpenSeq2Seq uses 2.0); other policies: the peak "
          "learning rate."),
      key("lr_schedule.warmup_steps", kLr, &L::warmup_steps, closed(0, 1e9),
          "Updates of learning-rate warmup (OpenSeq2Seq: lr_policy_params.warmup_steps)."),
      key("lr_schedule.warmup_init_lr", kLr, &L::warmup_init_lr, closed(0, 1000),
          "inverse_sqrt, constant, cosine and linear: the learning rate the linear warmup starts "
          "from."),
      key("lr_schedule.decay_steps", kLr, &L::decay_steps, closed(0, 1e12),
          "cosine and linear: the update at which the decay reaches final_lr; 0 = "
          "train.max_steps (a resume with another train.max_steps follows the new end's curve "
          "from its step on: the rate jumps to it)."),
      key("lr_schedule.final_lr", kLr, &L::final_lr, closed(0, 1000),
          "cosine and linear: the learning rate at decay_steps and after."),

      key("eval.every_steps", kEval, &E::every_steps, closed(0, 1e12),
          "Evaluate on the dev set every N updates (loss, then decoding and BLEU); 0 = never "
          "(OpenSeq2Seq: eval_steps)."),
      key("eval.max_sentences", kEval, &E::max_sentences, closed(0, 1e9),
          "Dev lines an evaluation decodes and scores: the first N lines of the dev file; 0 = "
          "every line (as sacreBLEU scores the whole file)."),
      key("eval.beam", kEval, &E::beam, closed(1, 256),
          "Beam size for dev decoding; 1 = greedy (OpenSeq2Seq: beam_size)."),
      key("eval.alpha", kEval, &E::alpha, closed(0, 10),
          "Length penalty exponent of beam search, `((5 + len) / 6)^alpha` (OpenSeq2Seq: alpha)."),
      key("eval.early_stop_patience", kEval, &E::early_stop_patience, closed(0, 1e6),
          "Stop after this many evaluations without a new best dev BLEU; 0 = never stop early."),
      key("eval.samples", kEval, &E::samples, closed(0, 1000),
          "Dev translations (source, reference, hypothesis) printed at each evaluation."),

      key("checkpoint.dir", kCkpt, &C::dir,
          "Directory for checkpoints (one sub-directory per saved step); empty = no checkpoints."),
      key("checkpoint.every_steps", kCkpt, &C::every_steps, closed(0, 1e12),
          "Save every N updates; 0 = only at the end of the run (OpenSeq2Seq: "
          "save_checkpoint_steps)."),
      key("checkpoint.keep", kCkpt, &C::keep, closed(0, 1e6),
          "Most recent checkpoints kept on disk, older ones are deleted; 0 = keep all."),

      key("log.every_steps", kLog, &G::every_steps, closed(1, 1e12),
          "Print a progress line and write metrics every N updates (OpenSeq2Seq: "
          "print_loss_steps)."),
      key("log.dir", kLog, &G::dir,
          "Directory for metrics.jsonl and TensorBoard events; empty = stdout only (OpenSeq2Seq: "
          "logdir)."),
      key("log.tensorboard", kLog, &G::tensorboard,
          "Write TensorBoard events into log.dir: scalars, each evaluation's sample translations "
          "(text) and the resolved config (hparams); no effect while log.dir is empty."),
      key("log.card", kLog, &G::card,
          "At the end of the run, write the run card (card.md, card.html and plots) into log.dir "
          "with nmt-report; needs python3 (matplotlib for the plots), never fails the run."),

      key("dist.bucket_mb", kDist, &P::bucket_mb, above_to(0, 16384),
          "Gradient bucket size in MiB: each bucket is all-reduced as soon as backward fills it."),
      key("dist.allreduce_dtype", kDist, &P::allreduce_dtype, kFloatDTypeNames,
          "Dtype gradients travel in during the all-reduce; bf16 and fp16 halve the traffic (cpu: "
          "always fp32, with a note)."),
      key("dist.checksum_every", kDist, &P::checksum_every, closed(0, 1e12),
          "Every N updates the ranks compare a checksum of their weights and stop if they "
          "differ; 0 = never."),
      key("dist.timeout_s", kDist, &P::timeout_s, closed(1, 604800),
          "Seconds a collective may wait for the other ranks before the run stops with an error."),
      key("dist.overlap", kDist, &P::overlap,
          "Start each bucket's all-reduce during backward, as soon as its gradients are final; "
          "false exchanges everything after backward (to measure what overlap buys)."),
      key("dist.probe_mb", kDist, &P::probe_mb, closed(0, 4096),
          "Size in MiB of the all-reduce timed a few times at start-up under mpirun, to measure "
          "the bandwidth the run card compares the training exchange with; 0 = no probe."),
  };
}

}  // namespace

const std::vector<ConfigSection>& config_sections() {
  static const std::vector<ConfigSection> sections = {
      {"model", "The Transformer's shape (OpenSeq2Seq: encoder_params and decoder_params)."},
      {"data", "Training and dev data, length limits, and the synthetic toy task."},
      {"train", "The training loop: batching, steps, loss, device, precision."},
      {"optimizer", "Adam (OpenSeq2Seq: optimizer and optimizer_params)."},
      {"lr_schedule", "The learning-rate policy (OpenSeq2Seq: lr_policy and lr_policy_params)."},
      {"eval", "Periodic dev-set evaluation: loss, decoding, BLEU."},
      {"checkpoint", "Atomic checkpoint directories: model, optimizer state, run state."},
      {"log", "Progress lines on stdout, metrics.jsonl and TensorBoard events."},
      {"dist", "Data-parallel training: the gradient exchange between ranks."},
  };
  return sections;
}

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = build_keys();
  return keys;
}

std::string DataConfig::synthetic_task() const {
  return train_is_synthetic() ? train.substr(kSyntheticPrefix.size()) : std::string();
}

std::string_view config_name(NormPosition value) {
  return name_of(kNormNames, value);
}
std::string_view config_name(InitScheme value) {
  return name_of(kInitNames, value);
}
std::string_view config_name(LengthPolicy value) {
  return name_of(kLengthPolicyNames, value);
}
std::string_view config_name(OptimizerKind value) {
  return name_of(kOptimizerNames, value);
}
std::string_view config_name(LrPolicy value) {
  return name_of(kLrPolicyNames, value);
}
std::string_view config_name(Device value) {
  return name_of(kDeviceNames, value);
}
std::string_view config_name(DType value) {
  return name_of(kFloatDTypeNames, value);
}

}  // namespace nmt
