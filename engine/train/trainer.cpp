// The training loop: setup or resume, steps, logging, evaluation, checkpoints, clean stops.
#include "engine/train/trainer.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_dir_lock.h"
#include "engine/checkpoint/checkpoint_finite.h"
#include "engine/model/flop_count.h"
#include "engine/model/transformer.h"
#include "engine/report/dataset_stats.h"
#include "engine/report/device_peak.h"
#include "engine/report/gpu_monitor.h"
#include "engine/report/run_report.h"
#include "engine/report/wall_time.h"
#include "engine/train/data_parallel.h"
#include "engine/train/init_from_checkpoint.h"
#include "engine/train/loss_scaler.h"
#include "engine/train/lr_schedule.h"
#include "engine/train/optimizer.h"
#include "engine/train/prepared_dir.h"
#include "engine/train/run_telemetry.h"
#include "engine/train/time_budget.h"
#include "engine/train/train_device.h"
#include "engine/train/training_data.h"
#include "kernels/elementwise.h"
#include "kernels/linear.h"

namespace nmt {

namespace fs = std::filesystem;

namespace {

// Written by the signal handler, read by the loop: a lock-free atomic is async-signal-safe. The
// handler may run on any thread of the process (NCCL, NVML, OpenMP, the GPU monitor).
std::atomic<int> g_stop_signal{0};
std::atomic<int> g_interrupts{0};  // SIGINTs received
static_assert(std::atomic<int>::is_always_lock_free);

// The first stop signal decides the stop reason. Repeated SIGTERMs (a scheduler signalling the
// process and its group, `timeout`, a launcher forwarding) change nothing: the run still saves and
// exits in order. A second SIGINT (Ctrl-C pressed twice by a person) ends the process at once:
// sigaction and raise are async-signal-safe.
void record_stop_signal(int signal_number) {
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, signal_number);
  if (signal_number == SIGINT && g_interrupts.fetch_add(1) >= 1) {
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    sigemptyset(&default_action.sa_mask);
    sigaction(SIGINT, &default_action, nullptr);
    raise(SIGINT);
  }
}

std::string signal_name(int signal_number) {
  if (signal_number == SIGTERM) return "SIGTERM";
  if (signal_number == SIGINT) return "SIGINT";
  return "signal " + std::to_string(signal_number);
}

// The vocabulary file of an nmt-prep directory: recorded in checkpoints, checked on resume.
std::string vocabulary_path(const RunConfig& cfg) {
  if (cfg.data.train_is_synthetic()) return "";
  fs::path dir = cfg.data.train;
  return (dir / prep_report_string(read_prep_report(dir), dir, {"vocab", "file"})).string();
}

// Fails before any training when checkpoints could not be written at the end.
void check_checkpoint_dir_writable(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw CheckpointError("checkpoint.dir: cannot create " + dir + ": " +
                          (ec ? ec.message() : "a file of that name exists"));
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw CheckpointError("checkpoint.dir: " + dir + " is not writable: " + std::strerror(errno));
}

// Everything the loop carries from step to step that a checkpoint must bring back (besides the
// tensors and the data position).
struct LoopState {
  int64_t step = 0;
  IntervalStats interval;
  std::optional<BestMetric> best;
  int64_t evals_since_best = 0;

  nlohmann::json extra() const {
    nlohmann::json j = {{"interval", interval.sums_to_json()},
                        {"evals_since_best", evals_since_best},
                        {"best", nullptr}};
    if (best)
      j["best"] = {{"name", best->metric.name},
                   {"value", best->metric.value},
                   {"higher_is_better", best->metric.higher_is_better},
                   {"step", best->step}};
    return j;
  }

  // A checkpoint without these (saved by another tool) resumes with empty sums.
  void restore_extra(const nlohmann::json& extra) {
    if (!extra.is_object()) return;
    if (extra.contains("interval")) interval = IntervalStats::sums_from_json(extra["interval"]);
    evals_since_best = extra.value("evals_since_best", int64_t{0});
    if (extra.contains("best") && extra["best"].is_object()) {
      const nlohmann::json& b = extra["best"];
      best = BestMetric{{b.at("name").get<std::string>(), b.at("value").get<double>(),
                         b.at("higher_is_better").get<bool>()},
                        b.at("step").get<int64_t>()};
    }
  }
};

class TrainingRun {
 public:
  // `device_lines` (resolve_train_device's) open the start-up output once the data is loaded.
  TrainingRun(const RunConfig& cfg, std::ostream& out, const TrainOptions& options,
              DataParallel& dp, const std::vector<std::string>& device_lines);
  TrainSummary run();

 private:
  void resume_from_checkpoint();
  void train_step(int64_t step, StepPhaseTimer& timer);
  bool time_is_up(int64_t step) const;
  bool eval_due(int64_t step) const;
  void log_line(int64_t step, bool reset_interval);
  CheckpointMetric evaluate(int64_t step);
  void save(std::optional<CheckpointMetric> metric);
  std::string last_good_checkpoint() const;
  void finish(const std::string& stop_reason);

  const RunConfig& cfg_;
  LrScheduleConfig lr_;  // cfg_.lr_schedule with the decay end resolved (decay_end)
  std::ostream& out_;
  TrainOptions options_;
  DataParallel& dp_;
  const Device device_;                        // train.device as resolved (resolve_train_device)
  std::optional<CheckpointDirLock> dir_lock_;  // held by rank 0 for the whole run
  SteadyClock::time_point start_ = SteadyClock::now(), loop_start_;
  uint64_t seed_;
  // Keys this rank's dropout masks: the seed itself on rank 0 (so one process and rank 0 agree),
  // mixed with the rank elsewhere, so ranks do not drop the same positions of their batches.
  uint64_t dropout_seed_;
  float label_smoothing_;
  LossScaler loss_scaler_;
  std::unique_ptr<TrainingData> data_;
  std::unique_ptr<Transformer> model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<RunReporter> reporter_;
  std::unique_ptr<RunTelemetry> telemetry_;  // per-rank and per-node records for the run card
  std::string vocab_path_, resumed_from_;
  LoopState state_;
  int stop_signal_ = 0;          // the stop signal as of the last step, agreed by every rank
  double max_time_seconds_ = 0;  // train.max_time; 0 = no limit
  bool time_up_ = false;         // train.max_time reached as of the last step, agreed by every rank
  TimeSpent spent_;              // steps, evaluations and saves of this process (ETA, max_time)
  int64_t bad_steps_ = 0;        // consecutive steps with a non-finite loss or gradient norm
  RunReport report_;
  TrainSummary summary_;
};

TrainingRun::TrainingRun(const RunConfig& cfg, std::ostream& out, const TrainOptions& options,
                         DataParallel& dp, const std::vector<std::string>& device_lines)
    : cfg_(cfg),
      lr_(cfg.lr_schedule),
      out_(out),
      options_(options),
      dp_(dp),
      device_(cfg.train.device.value()),
      seed_(static_cast<uint64_t>(cfg.train.seed)),
      dropout_seed_(seed_ ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(dp.rank()))),
      label_smoothing_(static_cast<float>(cfg.train.label_smoothing)),
      loss_scaler_(cfg.train.precision, cfg.train.loss_scale, cfg.train.loss_scale_window) {
  if (cfg.train.threads > 0) omp_set_num_threads(static_cast<int>(cfg.train.threads));
  max_time_seconds_ = parse_max_time(cfg.train.max_time).value_or(0.0);
  lr_.decay_steps = decay_end(cfg.lr_schedule, cfg.train.max_steps);
  if (cfg.eval.beam > 1)
    out << "note: eval.beam = " << cfg.eval.beam
        << ": evaluation during training decodes greedily for now (nmt-translate runs beam "
           "search)\n";
  const std::string& ckpt_dir = cfg.checkpoint.dir;
  if (options.resume && !options.init_from.empty())
    throw std::invalid_argument(
        "--init-from starts a new run: it cannot be combined with --resume");
  if (options.resume && ckpt_dir.empty())
    throw std::runtime_error("--resume needs checkpoint.dir (the directory to resume from)");
  if (options.resume && !fs::is_directory(ckpt_dir))
    throw CheckpointError("no checkpoint in " + ckpt_dir + " to resume from");
  if (!ckpt_dir.empty()) {
    check_checkpoint_dir_writable(ckpt_dir);
    // One run per directory, locked before its checkpoints are looked at (rank 0 writes them).
    if (dp.is_root()) {
      dir_lock_.emplace(ckpt_dir);
      if (!dir_lock_->warning().empty()) out << "warning: " << dir_lock_->warning() << "\n";
    }
  }
  if (options.resume) {  // before the (possibly slow) data loading
    std::optional<std::string> latest = find_latest_checkpoint(ckpt_dir, out);
    if (!latest) throw CheckpointError("no checkpoint in " + ckpt_dir + " to resume from");
    resumed_from_ = *latest;
  }
  // A new run must not silently replace (and prune) the checkpoints of another one.
  if (!options.resume && !ckpt_dir.empty())
    if (std::optional<std::string> latest = find_latest_checkpoint(ckpt_dir, out))
      throw CheckpointError("checkpoint.dir " + ckpt_dir + " already holds " + *latest +
                            ": pass --resume to continue that run, or choose another "
                            "checkpoint.dir");

  // After the data is found: a bad data path stays a one-line error (test/apps/train_cli_test.sh).
  data_ = make_training_data(cfg, dp.world_size(), dp.rank());
  for (const std::string& line : device_lines) out << line << "\n";
  if (device_ == Device::cuda) {
    if (cfg.train.gemm_autotune) set_gemm_autotune(true);
    if (gemm_autotune_enabled())
      out << "cuBLASLt autotuning on (train.gemm_autotune or NMT_GEMM_AUTOTUNE): each product "
             "shape's algorithm is timed at its first use\n";
  }
  vocab_path_ = vocabulary_path(cfg);
  report_.dataset = read_dataset_stats(cfg.data);
  report_.peak = device_peak_for_training(device_, cfg.train.precision);
  int64_t max_len = data_->max_padded_len();
  int64_t max_rows = planned_rows(cfg.train.batch_tokens, max_len);
  ModelShape shape = model_shape_from(cfg.model, data_->vocab_size(), cfg.train.precision);
  // The overlapped exchange takes each stage's gradients as backward finishes them, which keeps
  // the weight-gradient queue off in every backward when each step is one micro-batch: plan the
  // model without the queue's buffers then (engine/model/weight_grad_queue.h).
  ModelPlan plan;
  plan.queue_weight_grads =
      !(dp.world_size() > 1 && cfg.dist.overlap && cfg.train.update_freq == 1);
  model_ = std::make_unique<Transformer>(shape, device_, max_rows, max_len, plan);
  model_->params().initialize(seed_, cfg.model.init);
  if (!options.init_from.empty())
    init_from_checkpoint(options.init_from, model_->params(), cfg, vocab_path_, out);
  optimizer_ = std::make_unique<Optimizer>(model_->params(), cfg.optimizer, device_);
  model_->set_train_graphs(device_ == Device::cuda && cfg.train.cuda_graphs);
  out << "data: " << data_->describe() << "\n"
      << "model: " << model_->params().total_elements() << " parameters (init "
      << config_name(cfg.model.init) << "), arena " << model_->arena_bytes() / (1 << 20) << " MiB, "
      << omp_get_max_threads() << " threads\n";
  if (dp.world_size() > 1)
    out << "data parallel: " << dp.world_size() << " ranks over " << dp.backend()
        << ", gradient buckets of " << cfg.dist.bucket_mb << " MB\n";
  out << std::flush;
  if (options.resume) resume_from_checkpoint();
  dp.attach(model_->params());  // every rank starts from rank 0's weights
  reporter_ = std::make_unique<RunReporter>(cfg, out, options.resume);
}

void TrainingRun::resume_from_checkpoint() {
  LoadedCheckpoint ck = load_checkpoint(resumed_from_, model_->params(), optimizer_->first_moment(),
                                        optimizer_->second_moment(), cfg_);
  if (!vocab_path_.empty()) check_checkpoint_vocabulary(ck.state, vocab_path_);
  try {
    data_->restore(ck.state.data_position);
    state_.restore_extra(ck.state.extra);
    if (loss_scaler_.dynamic())
      loss_scaler_.restore({{"scale", ck.state.loss_scale},
                            {"clean_steps", ck.state.extra.value("loss_scale_clean_steps", 0)}});
  } catch (const std::exception& e) {
    throw CheckpointError(resumed_from_ + "/state.json: cannot resume from it: " + e.what());
  }
  state_.step = ck.state.step;
  out_ << "resumed from " << resumed_from_ << " at step " << state_.step << "\n";
  for (const std::string& change : describe_config_changes(ck.config, cfg_))
    out_ << "  config change: " << change << "\n";
  if (ck.state.seed != seed_)
    out_ << "  warning: seed " << seed_ << " differs from the checkpoint's " << ck.state.seed
         << ": dropout masks will differ from the original run\n";
  out_ << std::flush;
}

void TrainingRun::train_step(int64_t step, StepPhaseTimer& timer) {
  timer.start();
  model_->zero_grads();
  // Dropout is keyed by (seed, step): a resumed run draws what the uninterrupted one drew.
  StepContext ctx{dropout_seed_, static_cast<uint64_t>(step), true};
  double global_tokens = 0, local_tokens = 0, loss = 0, correct = 0, data_seconds = 0;
  auto add_sums = [&](const LossSums& s) {
    local_tokens += static_cast<double>(s.tokens);
    loss += s.loss;
    correct += static_cast<double>(s.correct);
  };
  for (int64_t micro = 0; micro < cfg_.train.update_freq; ++micro) {
    auto data_start = SteadyClock::now();
    Batch batch = data_->next_train();
    data_seconds += seconds_since(data_start);
    report_.train_flops += training_flops(model_->shape(), batch_dims(batch));
    const bool last = micro + 1 == cfg_.train.update_freq;
    // Only the last micro-batch's gradients are final: its backward starts the exchange.
    if (last && dp_.overlaps_backward())
      model_->set_grad_ready_hook(
          [this](const Param& p) { dp_.mark_ready(p); },
          [this](const std::vector<const Param*>& ps) { return dp_.buckets_completed_by(ps); });
    model_->start_forward_backward(batch, ctx, label_smoothing_,
                                   static_cast<float>(loss_scaler_.scale()));
    model_->set_grad_ready_hook(nullptr);
    global_tokens += static_cast<double>(data_->last_global_tgt_tokens());
    // The next micro-batch overwrites the sums; the last one's are read after the update is
    // enqueued, so that the GPU goes from backward to the optimizer without waiting on the host.
    if (!last) add_sums(model_->loss_sums());
  }
  timer.forward_backward_done();
  // Gradients summed over ranks (only after the last micro-batch).
  const GradExchangeStats& exchange = dp_.reduce_gradients();
  double lr = learning_rate_at(lr_, model_->shape().d_model, step);
  // Dividing by tokens * scale unscales the gradients (fp16 loss scaling; the scale is 1
  // otherwise). The norm and the clipping stay on the device; a non-finite norm skips the update
  // there.
  optimizer_->enqueue_step(step, lr, global_tokens * loss_scaler_.scale(), cfg_.train.clip_norm);
  // A bad target throws here, after the update was enqueued: the run stops with the error and
  // saves nothing, so no checkpoint holds that update.
  add_sums(model_->loss_sums());
  const OptimizerStepStats st = optimizer_->finish_step();
  // The log's sums are summed over ranks too, so every rank holds the same interval state (and a
  // checkpoint from rank 0 fits them all).
  // A stop signal read here is agreed on by every rank through the same sum: mpirun may deliver it
  // to some ranks only, or to each at a different step, and all must stop after the same step.
  int stop = options_.stop_signal ? options_.stop_signal->load() : 0;
  bool time_up = time_is_up(step);  // so is train.max_time's: the ranks' clocks differ a little
  if (dp_.world_size() > 1) {
    std::vector<double> sums = dp_.sum({loss, correct, local_tokens, stop == SIGTERM ? 1.0 : 0.0,
                                        stop == SIGINT ? 1.0 : 0.0, time_up ? 1.0 : 0.0});
    loss = sums[0], correct = sums[1], local_tokens = sums[2];
    stop = sums[4] > 0 ? SIGINT : (sums[3] > 0 ? SIGTERM : stop);
    time_up = sums[5] > 0;
  }
  stop_signal_ = stop;
  time_up_ = time_up;
  state_.interval.loss += loss;
  state_.interval.correct += correct;
  loss_scaler_.update(st.skipped);
  // The sums are global, so every rank counts the same consecutive bad steps.
  bad_steps_ = st.skipped || !std::isfinite(loss) ? bad_steps_ + 1 : 0;
  dp_.verify_parameters(model_->params(), step, cfg_.dist.checksum_every);
  StepTimes times = timer.finish();
  times.comm_seconds = exchange.comm_seconds;
  times.exposed_comm_seconds = exchange.exposed_seconds;
  times.comm_bytes = static_cast<double>(exchange.bytes);
  times.data_seconds = data_seconds;
  // The timer counts the exchange's wait as optimizer time; report it on its own.
  times.optimizer_seconds = std::max(0.0, times.optimizer_seconds - exchange.finish_wait_seconds);
  state_.step = step;
  state_.interval.tokens += local_tokens;
  if (!st.skipped) state_.interval.grad_norm += st.grad_norm;  // an fp16 overflow is inf
  ++state_.interval.steps;
  if (st.skipped) ++state_.interval.skipped;
  state_.interval.add_timing(times, local_tokens);
  ++report_.steps;
  spent_.step_seconds += times.step_seconds;
  ++spent_.steps;
  report_.train_seconds += times.step_seconds;
  report_.forward_backward_seconds += times.forward_backward_seconds;
  report_.optimizer_seconds += times.optimizer_seconds;
  report_.comm_seconds += times.comm_seconds;
  report_.exposed_comm_seconds += times.exposed_comm_seconds;
  report_.comm_bytes += times.comm_bytes;
  report_.data_seconds += times.data_seconds;
  report_.target_tokens += local_tokens;
}

bool TrainingRun::eval_due(int64_t step) const {
  const int64_t every = cfg_.eval.every_steps, last = cfg_.train.max_steps;
  return every > 0 && step <= last && (step % every == 0 || step == last) && data_->dev_pairs() > 0;
}

// train.max_time, counted from process start (MPI/NCCL set-up and data loading included): after
// this step, would its evaluation, one more step with its evaluation and a save still end before
// the limit? Before the first save, the checkpoint's size at 100 MB/s stands in for its duration,
// and before the first evaluation that save estimate stands in for an evaluation's.
bool TrainingRun::time_is_up(int64_t step) const {
  if (max_time_seconds_ <= 0) return false;
  double mean_step = spent_.steps > 0 ? spent_.step_seconds / static_cast<double>(spent_.steps)
                                      : seconds_since(loop_start_);
  double evals = (eval_due(step) ? 1.0 : 0.0) + (eval_due(step + 1) ? 1.0 : 0.0);
  double checkpoint_bytes = 12.0 * static_cast<double>(model_->params().total_elements());
  const double save_estimate = expected_save_seconds(spent_, checkpoint_bytes / 100e6);
  double save = cfg_.checkpoint.dir.empty() || !dp_.is_root() ? 0.0 : save_estimate;
  double mean_eval =
      spent_.evals > 0 ? spent_.eval_seconds / static_cast<double>(spent_.evals) : save_estimate;
  return must_stop_for_time(elapsed_since_process_start(), max_time_seconds_,
                            mean_step + evals * mean_eval, save);
}

// Prints the interval's line. A line between regular boundaries (the last step, a stop) keeps the
// sums: the checkpoint saves them, and the resumed run's next regular line covers the full
// interval as the uninterrupted run's does.
void TrainingRun::log_line(int64_t step, bool reset_interval) {
  // What is left after this step, including this step's own evaluation and save (still to come).
  const int64_t last = cfg_.train.max_steps;
  WorkLeft left{last - step, 0, 0};
  if (cfg_.eval.every_steps > 0 && data_->dev_pairs() > 0)
    left.evals = events_due(step - 1, last, cfg_.eval.every_steps, true);
  if (!cfg_.checkpoint.dir.empty() && dp_.is_root())
    left.saves = events_due(step - 1, last, cfg_.checkpoint.every_steps, true);
  double eta = eta_seconds(spent_, left);
  double lr = learning_rate_at(lr_, model_->shape().d_model, step);
  TrainRecord record = make_train_record(step, data_->epoch(), lr, eta, state_.interval);
  record.loss_scale = loss_scaler_.scale();
  record.dynamic_loss_scale = loss_scaler_.dynamic();
  reporter_->log_train(record);
  if (reset_interval) reporter_->log_record(telemetry_->interval_record(step, state_.interval));
  summary_.last_loss = record.loss;
  if (reset_interval) state_.interval = IntervalStats{};
}

CheckpointMetric TrainingRun::evaluate(int64_t step) {
  auto t0 = SteadyClock::now();
  summary_.last_eval = evaluate_dev(*model_, *data_, label_smoothing_, eval_options_from(cfg_));
  const double seconds = seconds_since(t0);
  spent_.eval_seconds += seconds;
  ++spent_.evals;
  reporter_->log_eval(step, summary_.last_eval, seconds);
  report_.dev_lines = RunReport::DevLines{
      summary_.last_eval.sentences, summary_.last_eval.lines_in_file, summary_.last_eval.truncated};
  CheckpointMetric metric = eval_metric(summary_.last_eval);
  bool improved =
      std::isfinite(metric.value) && (!state_.best || state_.best->metric.name != metric.name ||
                                      metric.value > state_.best->metric.value);
  if (improved) {
    state_.best = BestMetric{metric, step};
    state_.evals_since_best = 0;
  } else {
    ++state_.evals_since_best;
  }
  return metric;
}

// Where a diverged run can be resumed from: this run's last save, else the one it resumed from.
std::string TrainingRun::last_good_checkpoint() const {
  if (!summary_.last_checkpoint.empty()) return summary_.last_checkpoint;
  if (!resumed_from_.empty()) return resumed_from_;
  return cfg_.checkpoint.dir.empty() ? "none (no checkpoint.dir)" : "none yet";
}

void TrainingRun::save(std::optional<CheckpointMetric> metric) {
  CheckpointState s;
  s.step = state_.step;
  s.epoch = data_->epoch();
  s.data_position = data_->position();
  s.seed = seed_;
  s.loss_scale = loss_scaler_.scale();
  s.lr_schedule = {{"policy", std::string(config_name(cfg_.lr_schedule.policy))},
                   {"lr", learning_rate_at(lr_, model_->shape().d_model, state_.step)}};
  s.vocab_path = vocab_path_;
  s.extra = state_.extra();
  s.extra["loss_scale_clean_steps"] = loss_scaler_.to_json()["clean_steps"];
  SavedCheckpoint saved;
  try {
    saved = save_checkpoint(cfg_.checkpoint.dir, model_->params(), optimizer_->first_moment(),
                            optimizer_->second_moment(), s, cfg_, cfg_.checkpoint.keep, metric);
  } catch (const NonFiniteTensorError& e) {
    throw NonFiniteTensorError(std::string(e.what()) + " at step " + std::to_string(state_.step) +
                               "; last good checkpoint: " + last_good_checkpoint());
  }
  ++report_.checkpoints;
  report_.checkpoint_seconds += saved.seconds;
  spent_.save_seconds += saved.seconds;
  spent_.last_save_seconds = saved.seconds;
  ++spent_.saves;
  report_.last_checkpoint = saved.path;
  report_.last_checkpoint_bytes = saved.bytes;
  summary_.last_checkpoint = saved.path;
  reporter_->log_checkpoint(state_.step, saved);
}

TrainSummary TrainingRun::run() {
  const int64_t first_step = state_.step;
  summary_.first_step = report_.first_step = first_step;
  reporter_->log_start({{"event", options_.resume ? "resume" : "start"},
                        {"step", first_step},
                        {"checkpoint", null_if_empty(resumed_from_)},
                        {"parameters", model_->params().total_elements()},
                        {"device", std::string(config_name(device_))},
                        {"command_line", options_.command_line}});
  if (first_step >= cfg_.train.max_steps)
    reporter_->log_message("nothing to train: step " + std::to_string(first_step) +
                           " already reaches train.max_steps " +
                           std::to_string(cfg_.train.max_steps));
  const std::string& ckpt_dir = cfg_.checkpoint.dir;
  StepPhaseTimer timer(device_);
  std::string stop_reason = "max_steps";
  GpuMonitor gpu_monitor;  // its destructor stops the sampling thread if the loop throws
  if (device_ == Device::cuda) gpu_monitor.start();
  telemetry_ =
      std::make_unique<RunTelemetry>(dp_, device_ == Device::cuda ? &gpu_monitor : nullptr);
  reporter_->log_record(telemetry_->cluster_record(first_step, device_, cfg_.dist.probe_mb));
  loop_start_ = SteadyClock::now();
  for (int64_t step = first_step + 1; step <= cfg_.train.max_steps; ++step) {
    train_step(step, timer);
    if (step == first_step + 1 && !(step % cfg_.log.every_steps == 0)) {
      char line[120];
      std::snprintf(line, sizeof line, "first step done in %.2f s (%.1f s since start)",
                    report_.train_seconds, seconds_since(start_));
      reporter_->log_message(line);
    }
    if (cfg_.train.max_bad_steps > 0 && bad_steps_ >= cfg_.train.max_bad_steps)
      throw std::runtime_error(
          "training diverged: steps " + std::to_string(step - bad_steps_ + 1) + " to " +
          std::to_string(step) + " (" + std::to_string(bad_steps_) +
          " in a row, train.max_bad_steps) had a non-finite loss or gradient norm; stopped at "
          "step " +
          std::to_string(step) + " without saving; last good checkpoint: " +
          last_good_checkpoint() + " (resume from it with a lower learning rate)");
    int stop_signal = stop_signal_;
    bool regular_log = step % cfg_.log.every_steps == 0;
    bool last = step == cfg_.train.max_steps || stop_signal != 0 || time_up_;
    if (regular_log || last) log_line(step, regular_log);
    std::optional<CheckpointMetric> metric;  // only for the weights it measured (this step's)
    // A stop signal skips evaluation: decoding the dev set could outlast the grace period a
    // scheduler gives between SIGTERM and SIGKILL, and the checkpoint matters more.
    // So does train.max_time: the save must fit before the limit.
    bool eval_now = stop_signal == 0 && !time_up_ && eval_due(step);
    if (eval_now) {
      metric = evaluate(step);
      if (cfg_.eval.early_stop_patience > 0 &&
          state_.evals_since_best >= cfg_.eval.early_stop_patience) {
        if (!regular_log && !last) log_line(step, false);
        summary_.early_stopped = last = true;
        stop_reason = "early_stop";
      }
    }
    bool checkpoint_now =
        cfg_.checkpoint.every_steps > 0 && step % cfg_.checkpoint.every_steps == 0;
    if (!ckpt_dir.empty() && (checkpoint_now || last) && dp_.is_root()) save(metric);
    if (last) {
      if (stop_signal != 0 && step < cfg_.train.max_steps) {
        summary_.stop_signal = stop_signal;
        stop_reason = signal_name(stop_signal);
      } else if (time_up_ && step < cfg_.train.max_steps) {
        summary_.time_limit_reached = true;
        stop_reason = "max_time";
      }
      break;
    }
  }
  if (device_ == Device::cuda) report_.gpu_usage = gpu_monitor.stop();
  report_.ranks = telemetry_->ranks_summary(report_);
  finish(stop_reason);
  return summary_;
}

void TrainingRun::finish(const std::string& stop_reason) {
  summary_.steps = state_.step;
  summary_.wall_seconds = seconds_since(start_);
  summary_.card_dir = cfg_.log.card ? cfg_.log.dir : "";  // "" on ranks other than 0
  if (summary_.stop_signal != 0)
    reporter_->log_message(
        "stopped by " + stop_reason + " after step " + std::to_string(state_.step) +
        (summary_.last_checkpoint.empty()
             ? " (no checkpoint.dir: nothing saved)"
             : ": saved " + summary_.last_checkpoint + "; continue with --resume"));
  if (summary_.time_limit_reached) {
    char when[64];
    std::snprintf(when, sizeof when, "%.1f s after start", summary_.wall_seconds);
    reporter_->log_message(
        "stopped by train.max_time " + cfg_.train.max_time + " after step " +
        std::to_string(state_.step) + ", " + when +
        (summary_.last_checkpoint.empty()
             ? " (no checkpoint.dir: nothing saved)"
             : ": saved " + summary_.last_checkpoint + "; continue with --resume"));
  }
  if (summary_.early_stopped)
    reporter_->log_message("early stop: no better " + state_.best->metric.name + " in " +
                           std::to_string(state_.evals_since_best) + " evaluations since step " +
                           std::to_string(state_.best->step));
  if (const TrainGraphStats* graphs = model_->train_graph_stats())
    reporter_->log_message("cuda graphs (forward and backward): " + describe(*graphs));
  char line[160];
  std::snprintf(line, sizeof line, "done: %lld steps in %.1f s",
                static_cast<long long>(state_.step), summary_.wall_seconds);
  reporter_->log_message(line);
  report_.last_step = state_.step;
  report_.stop_reason = stop_reason;
  report_.wall_seconds = summary_.wall_seconds;
  report_.parameters = model_->params().total_elements();
  report_.device = device_;
  report_.world_size = dp_.world_size();
  if (options_.final_parameters) {
    Tensor master = model_->params().master();
    options_.final_parameters->resize(static_cast<size_t>(master.numel()));
    Tensor host(options_.final_parameters->data(), DType::f32, Device::cpu, {master.numel()});
    copy_tensor(master, host);
  }
  report_.peak_memory_bytes = model_->arena_bytes() + optimizer_->first_moment().bytes() +
                              optimizer_->second_moment().bytes();
  report_.best = state_.best;
  if (!cfg_.checkpoint.dir.empty())
    if (std::optional<BestCheckpoint> best = read_best_checkpoint(cfg_.checkpoint.dir))
      report_.best_checkpoint = best->path;
  reporter_->finish(report_);
}

}  // namespace

TrainSummary run_training(const RunConfig& requested, std::ostream& out,
                          const TrainOptions& options) {
  const ResolvedDevice resolved = resolve_train_device(requested);
  const RunConfig& cfg = resolved.cfg;
  DataParallel dp(cfg.dist, *cfg.train.device, options.distributed);
  if (dp.world_size() == 1) {
    TrainingRun run(cfg, out, options, dp, resolved.lines);
    return run.run();
  }
  // Rank 0 speaks for the job: the others log nowhere and write no files.
  RunConfig rank_cfg = cfg;
  std::ostringstream discard;
  if (!dp.is_root()) rank_cfg.log.dir.clear();
  try {
    TrainingRun run(rank_cfg, dp.is_root() ? out : discard, options, dp, resolved.lines);
    return run.run();
  } catch (const std::exception& e) {
    dp.abort(e.what());  // the other ranks would wait for this one forever
  }
}

std::atomic<int>& install_stop_signal_handlers() {
  struct sigaction action {};
  action.sa_handler = record_stop_signal;
  sigemptyset(&action.sa_mask);
  // No SA_RESETHAND: a second SIGTERM must not kill the run before it saves. SA_RESTART: system
  // calls the signal interrupts on other threads (checkpoint writes, MPI, NCCL) resume.
  action.sa_flags = SA_RESTART;
  for (int signal_number : {SIGTERM, SIGINT})
    if (sigaction(signal_number, &action, nullptr) != 0)
      throw std::runtime_error("cannot install a handler for " + signal_name(signal_number) + ": " +
                               std::strerror(errno));
  return g_stop_signal;
}

}  // namespace nmt
