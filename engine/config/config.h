// RunConfig: the typed, validated run configuration every app reads (one nested struct per config
// section), and the functions that load it from JSON + `--set` overrides and write it back.
// The key schema (types, ranges, docs) lives in engine/config/config_keys.cpp; docs/config.md is
// its output.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "data/length_policy.h"
#include "kernels/tensor.h"

namespace nmt {

// Every user error in a config (file, JSON, key, value, cross-key rule): one message naming it.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class NormPosition : uint8_t { post, pre };
enum class OptimizerKind : uint8_t { adam, lazyadam };
enum class LrPolicy : uint8_t { transformer_policy, inverse_sqrt, constant, cosine, linear };
// How the projections are initialised (engine/model/param_init.h has the distributions).
enum class InitScheme : uint8_t {
  xavier,  // every weight matrix Xavier-uniform per projection, biases 0 (the engine's first)
  torch,   // PyTorch nn.TransformerEncoderLayer/DecoderLayer defaults, drawn per layer
  // `torch` as nn.TransformerEncoder/Decoder builds it: one layer drawn, every layer of the stack
  // starting as a copy of it.
  torch_copies,
  fairseq,  // fairseq: q/k/v Xavier-uniform with gain 1/sqrt(2), the rest Xavier-uniform
  scaled,   // `torch`, residual-branch outputs scaled by 1/sqrt(branches in the stack) (GPT-2)
  small,    // SmallInit N(0, sqrt(2/(5d))) with Wang's N(0, 2/(L sqrt(d))) on branch outputs
  deepnet,  // DeepNet's Xavier-normal with gain beta on v, out, fc1, fc2 (encoder-decoder betas)
};

// Field defaults are THE defaults: the schema reads them from a default-constructed RunConfig.
struct ModelConfig {
  int64_t encoder_layers = 6;
  int64_t decoder_layers = 6;
  int64_t d_model = 512;
  int64_t num_heads = 8;
  int64_t ffn_dim = 2048;
  double dropout = 0.1;  // embeddings and every residual branch
  double attention_dropout = 0.1;
  double relu_dropout = 0.1;
  NormPosition norm = NormPosition::post;
  bool shared_embeddings = true;
  double layernorm_eps = 1e-6;
  int64_t max_positions = 1024;
  InitScheme init = InitScheme::torch_copies;
};

struct DataConfig {
  std::string train = "synthetic:reverse";  // "synthetic:<task>" or an nmt-prep directory
  std::string dev;                          // "" = none
  int64_t max_src_len = 256;
  int64_t max_tgt_len = 256;
  LengthPolicy length_policy = LengthPolicy::kDrop;
  int64_t synthetic_vocab = 16;
  int64_t synthetic_min_len = 2;
  int64_t synthetic_max_len = 12;
  int64_t synthetic_train_pairs = 50000;
  int64_t synthetic_dev_pairs = 500;

  bool train_is_synthetic() const { return train.starts_with(kSyntheticPrefix); }
  std::string synthetic_task() const;  // "reverse" for "synthetic:reverse"; "" when not synthetic
  static constexpr std::string_view kSyntheticPrefix = "synthetic:";
};

struct TrainConfig {
  int64_t max_steps = 100000;
  int64_t batch_tokens = 4096;  // per GPU, per micro-batch
  int64_t max_sentences = 0;    // 0 = no cap
  int64_t bucket_window = 100;
  int64_t update_freq = 1;
  int64_t seed = 1;
  // nullopt is `auto`: cuda when a GPU is visible, else cpu (engine/train/train_device.h resolves
  // it before a run, and the run's config, checkpoints included, records what it resolved to).
  std::optional<Device> device;
  DType precision = DType::bf16;  // f32, bf16 or f16 only
  double label_smoothing = 0.1;
  double clip_norm = 0.0;            // 0 = off
  int64_t threads = 0;               // 0 = all cores
  double loss_scale = 32768;         // fp16 only: the initial dynamic loss scale
  int64_t loss_scale_window = 1000;  // fp16 only: clean steps before the scale doubles
  int64_t max_bad_steps = 20;        // consecutive non-finite steps that stop the run; 0 = never
  std::string max_time;        // wall-clock limit: "" = none, "5400" s, "1:30:00", "2-00:00:00"
  bool gemm_autotune = false;  // time cuBLASLt's listed algorithms per product shape (GPU only)
  bool cuda_graphs = true;     // replay forward and backward from a CUDA graph per batch shape
};

struct OptimizerConfig {
  OptimizerKind name = OptimizerKind::adam;
  double beta1 = 0.9;
  double beta2 = 0.997;
  double epsilon = 1e-9;
  double weight_decay = 0.0;
};

struct LrScheduleConfig {
  LrPolicy policy = LrPolicy::transformer_policy;
  double learning_rate = 2.0;
  int64_t warmup_steps = 8000;
  double warmup_init_lr = 0.0;
  // cosine and linear: the step the decay ends at (0 = train.max_steps), and the rate there.
  int64_t decay_steps = 0;
  double final_lr = 0.0;
};

// The step a cosine or linear decay ends at: decay_steps, or the run's max_steps when 0.
inline int64_t decay_end(const LrScheduleConfig& l, int64_t max_steps) {
  return l.decay_steps > 0 ? l.decay_steps : max_steps;
}

struct EvalConfig {
  int64_t every_steps = 0;    // 0 = off
  int64_t max_sentences = 0;  // 0 = the whole dev set
  int64_t beam = 1;
  double alpha = 0.6;
  int64_t early_stop_patience = 0;  // 0 = never stop early
  int64_t samples = 3;
};

struct CheckpointConfig {
  std::string dir;  // "" = no checkpoints
  int64_t every_steps = 0;
  int64_t keep = 5;  // 0 = keep all
};

struct LogConfig {
  int64_t every_steps = 10;
  std::string dir;  // "" = stdout only
  bool tensorboard = true;
  bool card = true;  // the run card (card.md, card.html) in log.dir at the end of nmt-train
};

struct DistConfig {
  double bucket_mb = 25.0;
  DType allreduce_dtype = DType::f32;  // f32, bf16 or f16 only
  int64_t checksum_every = 100;        // 0 = off
  int64_t timeout_s = 60;
  bool overlap = true;  // start each bucket's all-reduce during backward
  // MiB of the all-reduce bandwidth probe at start-up under mpirun; 0 = off.
  double probe_mb = 64.0;
};

struct RunConfig {
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  OptimizerConfig optimizer;
  LrScheduleConfig lr_schedule;
  EvalConfig eval;
  CheckpointConfig checkpoint;
  LogConfig log;
  DistConfig dist;
};

// Reads the JSON file at `path` (// comments allowed), applies each "section.key=value" of `sets`
// in order (value parsed with the key's type), validates every key and the cross-key rules.
// Throws ConfigError with one message naming the file, key, value and what is allowed.
RunConfig load_run_config(const std::string& path, const std::vector<std::string>& sets = {});

// The config from an already parsed JSON object (e.g. a checkpoint's state.json "config"); missing
// keys take their defaults; validated like a file. `origin` names the source in error messages.
RunConfig run_config_from_json(const nlohmann::json& json, std::string_view origin = "config");

// Applies one "section.key=value" override to `cfg` (no cross-key validation: call
// validate_run_config after the last one).
void apply_config_override(RunConfig& cfg, std::string_view assignment);

// Checks every key's range and the cross-key rules (d_model % num_heads, eval needs a dev set...).
// `origin` prefixes the message.
void validate_run_config(const RunConfig& cfg, std::string_view origin = "config");

// The fully resolved config: every section, every key (nlohmann::json orders keys alphabetically).
nlohmann::json to_json(const RunConfig& cfg);

// The same, as indented JSON text in schema order (sections and keys as documented): for
// --print-config and for humans.
std::string format_run_config(const RunConfig& cfg);

// train.max_time in seconds: "" is 0 (no limit); "5400" (seconds), "1:30:00" (H:MM:SS) or
// "2-00:00:00" (D-HH:MM:SS, the forms of SLURM's --time). nullopt when malformed or 0.
std::optional<double> parse_max_time(std::string_view text);

// docs/config.md, generated from the schema.
std::string config_reference_markdown();

// Config spellings of the enums ("post", "lazyadam", "bf16", "cuda" ...).
std::string_view config_name(NormPosition value);
std::string_view config_name(InitScheme value);
std::string_view config_name(LengthPolicy value);
std::string_view config_name(OptimizerKind value);
std::string_view config_name(LrPolicy value);
std::string_view config_name(Device value);
std::string_view config_name(DType value);

}  // namespace nmt
