// Run reporting for the trainer: step timing split into forward+backward and optimizer, the
// per-interval sums, the human log line with the same fields in metrics.jsonl and TensorBoard,
// evaluation and checkpoint events, and the end-of-run report (stdout and log.dir/report.json).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/report/dataset_stats.h"
#include "engine/report/device_peak.h"
#include "engine/report/gpu_monitor.h"
#include "engine/report/metrics_log.h"
#include "engine/report/records.h"
#include "engine/report/tensorboard.h"

namespace nmt {

struct StepTimes {
  double forward_backward_seconds = 0;  // batches, forward, loss, backward (every micro-batch)
  double optimizer_seconds = 0;         // gradient norm, clipping, Adam
  double exposed_comm_seconds = 0;      // gradient all-reduce not hidden behind backward
  double comm_seconds = 0;              // all gradient all-reduces of the step
  double comm_bytes = 0;                // bytes this rank all-reduced
  double step_seconds = 0;              // host wall time of the whole step
  double data_seconds = 0;              // host time taking the step's batches (in fwd+bwd)
};

// Times the phases of one step. On the CPU with the host clock; on the GPU with CUDA events on
// the current stream, so the split is device time rather than kernel-launch time (finish() waits
// for the step's last kernel, which the optimizer's gradient-norm read nearly does anyway).
class StepPhaseTimer {
 public:
  explicit StepPhaseTimer(Device device);
  ~StepPhaseTimer();
  StepPhaseTimer(const StepPhaseTimer&) = delete;
  StepPhaseTimer& operator=(const StepPhaseTimer&) = delete;

  void start();                  // before the first micro-batch
  void forward_backward_done();  // before the optimizer
  StepTimes finish();            // after the optimizer

 private:
  struct CudaEvents;
  using Clock = std::chrono::steady_clock;
  Device device_;
  Clock::time_point start_, middle_;
  std::unique_ptr<CudaEvents> events_;
};

// Sums over the steps since the last regular log line (a multiple of log.every_steps).
struct IntervalStats {
  // Saved in checkpoints, so that a resumed run prints the lines an uninterrupted one would have.
  double loss = 0;     // label-smoothed loss summed over target tokens
  double tokens = 0;   // target tokens (this rank)
  double correct = 0;  // argmax hits
  double grad_norm = 0;
  int64_t steps = 0;
  int64_t skipped = 0;  // steps the optimizer skipped (non-finite gradient)
  // Timing of the steps run by this process (not saved: a resumed run times only its own steps).
  int64_t timed_steps = 0;
  double timed_tokens = 0;
  double step_seconds = 0, forward_backward_seconds = 0, optimizer_seconds = 0;
  double exposed_comm_seconds = 0, comm_seconds = 0, comm_bytes = 0;
  double data_seconds = 0;
  std::vector<float> step_ms;  // each timed step's wall time, for the run card's percentiles

  void add_timing(const StepTimes& t, double step_tokens);
  nlohmann::json sums_to_json() const;
  static IntervalStats sums_from_json(const nlohmann::json& sums);  // throws naming a bad key
};

// The numbers of one log line: the interval's means.
struct TrainRecord {
  int64_t step = 0, epoch = 0;
  double loss = 0, accuracy = 0, lr = 0, grad_norm = 0;
  double ms_per_step = 0, tokens_per_s = 0, forward_backward_ms = 0, optimizer_ms = 0;
  double exposed_comm_ms = 0, comm_ms = 0, comm_gb_per_s = 0;  // 0 for a single process
  double data_ms = 0;  // host time taking batches, part of forward_backward_ms
  double eta_seconds = 0;
  int64_t steps = 0, skipped = 0;
  double loss_scale = 1;            // the fp16 dynamic loss scale after the interval's last step
  bool dynamic_loss_scale = false;  // fp16: the log line shows loss_scale
};
TrainRecord make_train_record(int64_t step, int64_t epoch, double lr, double eta_seconds,
                              const IntervalStats& interval);

// "step 40 | epoch 0 | loss 1.2345 | acc 56.78% | lr 1.000e-03 | gnorm 0.123 | 12.3 ms/step
// (fwd+bwd 10.1, comm 0.0 exposed, opt 2.2) | 41234 tok/s | eta 12 s"
std::string format_train_line(const TrainRecord& r);
// The metrics.jsonl object: {"event": "train", "step", "epoch", "loss", "acc", "lr", ...}.
nlohmann::json train_record_json(const TrainRecord& r);
// {"event": "eval", "step", "loss", "token_accuracy", "greedy_token_accuracy", ..., "bleu"?}.
// Wall seconds since the process started (taken while static objects are initialised, before
// main): the records' `elapsed_s`, and the clock train.max_time is counted on.
double elapsed_since_process_start();

nlohmann::json eval_record_json(int64_t step, const EvalResult& e, double seconds);

struct BestMetric {
  CheckpointMetric metric;
  int64_t step = 0;
};

struct RunReport {
  int64_t first_step = 0;  // steps already done when this process started (0, or the resumed one)
  int64_t last_step = 0;
  int64_t steps = 0;                      // run by this process
  std::string stop_reason = "max_steps";  // "max_steps", "SIGTERM", "SIGINT", "early_stop"
  double wall_seconds = 0;                // setup, steps, evaluations and checkpoints
  double train_seconds = 0;               // the steps alone
  double forward_backward_seconds = 0, optimizer_seconds = 0;
  double comm_seconds = 0, exposed_comm_seconds = 0, comm_bytes = 0;  // gradient exchange
  double data_seconds = 0;  // host time taking batches (part of forward_backward_seconds)
  int world_size = 1;
  double target_tokens = 0;  // trained on by this process (this rank)
  int64_t parameters = 0;
  Device device = Device::cpu;
  uint64_t peak_memory_bytes = 0;  // the arenas (model + optimizer): everything a step uses
  std::optional<BestMetric> best;
  std::string best_checkpoint;  // from best.json of checkpoint.dir, "" if none
  int64_t checkpoints = 0;
  std::string last_checkpoint;
  uint64_t last_checkpoint_bytes = 0;
  double checkpoint_seconds = 0;  // all saves of this process
  // MFU: the counted training FLOPs of this rank's steps (engine/model/flop_count.h: 3 x the
  // forward matrix products of the padded batches) per train_seconds, over one card's peak.
  double train_flops = 0;
  DevicePeak peak;                      // device_peak_for_training(...)
  std::optional<GpuUsage> gpu_usage;    // GpuMonitor::stop(); nullopt on the CPU
  std::optional<DatasetStats> dataset;  // read_dataset_stats(...); nullopt for synthetic data
  // The last evaluation's coverage of the dev file; nullopt when this process did not evaluate.
  struct DevLines {
    int64_t scored = 0, in_file = 0;  // lines decoded and scored, of the file's lines
    int64_t truncated = 0;            // sources cut to model.max_positions
  };
  std::optional<DevLines> dev_lines;
  // Every rank's own numbers gathered to rank 0 (RunTelemetry::ranks_summary); null when unset.
  nlohmann::json ranks;

  double mean_step_ms() const;
  double tokens_per_second() const;
  double flops_per_second() const;         // counted FLOPs per second of step time
  std::optional<double> mfu() const;       // a fraction of peak.flops_per_s
  std::string mfu_unknown_reason() const;  // why mfu() is nullopt, "" when it is known
};
nlohmann::json to_json(const RunReport& r);
// A JSON string, or null for "".
nlohmann::json null_if_empty(const std::string& s);
std::string format_run_report(const RunReport& r);

// Where the lines of a run go: `out` always; log.dir/metrics.jsonl and TensorBoard events when
// configured. A new run truncates metrics.jsonl; a resumed one appends, after a "resume" event
// (readers drop earlier lines with a step above it: they came from the interrupted run).
class RunReporter {
 public:
  RunReporter(const RunConfig& cfg, std::ostream& out, bool resumed);

  // The "start" or "resume" event: the caller's fields (with "command_line") plus the resolved
  // config and the provenance (version/provenance.h); report.json repeats the three. In
  // TensorBoard, the resolved config as hyperparameters (the hparams dashboard), with the last
  // dev score and loss as its metrics.
  void log_start(nlohmann::json record);
  void log_train(const TrainRecord& r);
  // The evaluation's lines; in TensorBoard its scalars and, if any, its sample translations as a
  // Markdown table (text summary "eval/samples").
  void log_eval(int64_t step, const EvalResult& e, double seconds);
  void log_checkpoint(int64_t step, const SavedCheckpoint& saved);
  // Any other metrics.jsonl record (e.g. RunTelemetry's "cluster" and "telemetry"), with "time".
  void log_record(nlohmann::json record);
  void log_message(const std::string& line);  // stdout only
  // Prints the report and writes log.dir/report.json (temporary file + rename).
  void finish(const RunReport& report);

 private:
  std::ostream& out_;
  std::string log_dir_;
  nlohmann::json config_;         // the resolved config, in the start event (the run card reads it)
  nlohmann::json invocation_;     // {"provenance", "command_line", "config"} for report.json
  std::string eval_metric_name_;  // what eval_metric() will name the evaluations' score
  std::unique_ptr<MetricsLog> metrics_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace nmt
