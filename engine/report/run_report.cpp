// Run reporting: step phase timing, log lines, metrics.jsonl and TensorBoard records, report.json.
#include "engine/report/run_report.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "engine/report/tensorboard_plugins.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/stream.h"
#include "version/provenance.h"

namespace nmt {

namespace fs = std::filesystem;

// ---- StepPhaseTimer ----

struct StepPhaseTimer::CudaEvents {
  cudaEvent_t start = nullptr, middle = nullptr, end = nullptr;
  ~CudaEvents() {
    // Destroying an event never fails in a way worth reporting at teardown.
    for (cudaEvent_t e : {start, middle, end})
      if (e) cudaEventDestroy(e);
  }
};

StepPhaseTimer::StepPhaseTimer(Device device) : device_(device) {
  if (device_ != Device::cuda) return;
  events_ = std::make_unique<CudaEvents>();
  CUDA_CHECK(cudaEventCreate(&events_->start));
  CUDA_CHECK(cudaEventCreate(&events_->middle));
  CUDA_CHECK(cudaEventCreate(&events_->end));
}

StepPhaseTimer::~StepPhaseTimer() = default;

void StepPhaseTimer::start() {
  start_ = Clock::now();
  if (events_) CUDA_CHECK(cudaEventRecord(events_->start, cuda::current_stream()));
}

void StepPhaseTimer::forward_backward_done() {
  middle_ = Clock::now();
  if (events_) CUDA_CHECK(cudaEventRecord(events_->middle, cuda::current_stream()));
}

StepTimes StepPhaseTimer::finish() {
  StepTimes t;
  if (events_) {
    CUDA_CHECK(cudaEventRecord(events_->end, cuda::current_stream()));
    CUDA_CHECK(cudaEventSynchronize(events_->end));
    float fwd_bwd_ms = 0, optimizer_ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&fwd_bwd_ms, events_->start, events_->middle));
    CUDA_CHECK(cudaEventElapsedTime(&optimizer_ms, events_->middle, events_->end));
    t.forward_backward_seconds = fwd_bwd_ms / 1000.0;
    t.optimizer_seconds = optimizer_ms / 1000.0;
  }
  auto end = Clock::now();
  if (!events_) {
    t.forward_backward_seconds = std::chrono::duration<double>(middle_ - start_).count();
    t.optimizer_seconds = std::chrono::duration<double>(end - middle_).count();
  }
  t.step_seconds = std::chrono::duration<double>(end - start_).count();
  return t;
}

// ---- IntervalStats and the train record ----

void IntervalStats::add_timing(const StepTimes& t, double step_tokens) {
  ++timed_steps;
  timed_tokens += step_tokens;
  step_seconds += t.step_seconds;
  forward_backward_seconds += t.forward_backward_seconds;
  optimizer_seconds += t.optimizer_seconds;
  exposed_comm_seconds += t.exposed_comm_seconds;
  comm_seconds += t.comm_seconds;
  comm_bytes += t.comm_bytes;
  data_seconds += t.data_seconds;
  step_ms.push_back(static_cast<float>(1000 * t.step_seconds));
}

nlohmann::json IntervalStats::sums_to_json() const {
  // nlohmann writes doubles with 17 significant digits: they read back bit for bit.
  return {{"loss", loss},           {"tokens", tokens}, {"correct", correct},
          {"grad_norm", grad_norm}, {"steps", steps},   {"skipped", skipped}};
}

IntervalStats IntervalStats::sums_from_json(const nlohmann::json& sums) {
  IntervalStats s;
  try {
    s.loss = sums.at("loss").get<double>();
    s.tokens = sums.at("tokens").get<double>();
    s.correct = sums.at("correct").get<double>();
    s.grad_norm = sums.at("grad_norm").get<double>();
    s.steps = sums.at("steps").get<int64_t>();
    s.skipped = sums.at("skipped").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string("checkpoint state.json extra.interval: ") + e.what());
  }
  return s;
}

TrainRecord make_train_record(int64_t step, int64_t epoch, double lr, double eta_seconds,
                              const IntervalStats& s) {
  TrainRecord r;
  r.step = step;
  r.epoch = epoch;
  r.lr = lr;
  r.eta_seconds = eta_seconds;
  r.steps = s.steps;
  r.skipped = s.skipped;
  r.loss = s.loss / std::max(s.tokens, 1.0);
  r.accuracy = s.correct / std::max(s.tokens, 1.0);
  r.grad_norm = s.grad_norm / static_cast<double>(std::max<int64_t>(s.steps, 1));
  auto timed = static_cast<double>(std::max<int64_t>(s.timed_steps, 1));
  r.ms_per_step = 1000 * s.step_seconds / timed;
  r.forward_backward_ms = 1000 * s.forward_backward_seconds / timed;
  r.optimizer_ms = 1000 * s.optimizer_seconds / timed;
  r.tokens_per_s = s.timed_tokens / std::max(s.step_seconds, 1e-9);
  r.exposed_comm_ms = 1000 * s.exposed_comm_seconds / timed;
  r.comm_ms = 1000 * s.comm_seconds / timed;
  r.data_ms = 1000 * s.data_seconds / timed;
  r.comm_gb_per_s = s.comm_seconds > 0 ? s.comm_bytes / s.comm_seconds / 1e9 : 0;
  return r;
}

static std::string format_scale(double scale) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", scale);
  return text;
}

std::string format_train_line(const TrainRecord& r) {
  char line[400];
  std::snprintf(line, sizeof line,
                "step %lld | epoch %lld | loss %.4f | acc %.2f%% | lr %.3e | gnorm %.3f%s | "
                "%.1f ms/step (fwd+bwd %.1f, comm %.1f exposed, opt %.1f) | %.0f tok/s | "
                "eta %.0f s%s\n",
                static_cast<long long>(r.step), static_cast<long long>(r.epoch), r.loss,
                100 * r.accuracy, r.lr, r.grad_norm,
                r.dynamic_loss_scale ? (" | scale " + format_scale(r.loss_scale)).c_str() : "",
                r.ms_per_step, r.forward_backward_ms, r.exposed_comm_ms, r.optimizer_ms,
                r.tokens_per_s, r.eta_seconds,
                r.skipped > 0 ? (" | " + std::to_string(r.skipped) + " skipped").c_str() : "");
  return line;
}

static double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Taken while the program's static objects are initialised, before main(): the train and eval
// records carry `elapsed_s`, wall seconds since then (setup and evaluations included).
static const std::chrono::steady_clock::time_point kProcessStart = std::chrono::steady_clock::now();

double elapsed_since_process_start() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - kProcessStart).count();
}

nlohmann::json train_record_json(const TrainRecord& r) {
  // A single process exchanges nothing: the comm fields are 0.
  return {{"event", "train"},
          {"step", r.step},
          {"epoch", r.epoch},
          {"loss", r.loss},
          {"acc", r.accuracy},
          {"lr", r.lr},
          {"grad_norm", r.grad_norm},
          {"loss_scale", r.loss_scale},
          {"ms_per_step", r.ms_per_step},
          {"tokens_per_s", r.tokens_per_s},
          {"fwd_bwd_ms", r.forward_backward_ms},
          {"optimizer_ms", r.optimizer_ms},
          {"exposed_comm_ms", r.exposed_comm_ms},
          {"comm_ms", r.comm_ms},
          {"comm_algbw_gb_per_s", r.comm_gb_per_s},
          {"data_ms", r.data_ms},
          {"eta_s", r.eta_seconds},
          {"steps", r.steps},
          {"skipped_steps", r.skipped},
          {"time", unix_time()},
          {"elapsed_s", elapsed_since_process_start()}};
}

nlohmann::json eval_record_json(int64_t step, const EvalResult& e, double seconds) {
  nlohmann::json j = {{"event", "eval"},
                      {"step", step},
                      {"loss", e.loss},
                      {"token_accuracy", e.token_accuracy},
                      {"greedy_token_accuracy", e.greedy_token_accuracy},
                      {"greedy_exact", e.greedy_exact},
                      {"sentences", e.sentences},
                      {"lines_in_file", e.lines_in_file},
                      {"truncated_sources", e.truncated},
                      {"loss_sentences", e.loss_sentences},
                      {"eval_s", seconds},
                      {"loss_s", e.loss_seconds},
                      {"decode_s", e.decode_seconds},
                      {"replanned_lines", e.replanned_lines},
                      {"capped_lines", e.capped_lines},
                      {"time", unix_time()},
                      {"elapsed_s", elapsed_since_process_start()}};
  if (e.has_bleu) {
    j["bleu"] = e.bleu;
    j["bleu_signature"] = e.bleu_signature;
  }
  return j;
}

// ---- RunReport ----

nlohmann::json null_if_empty(const std::string& s) {
  return s.empty() ? nlohmann::json() : nlohmann::json(s);
}

double RunReport::mean_step_ms() const {
  return steps > 0 ? 1000 * train_seconds / static_cast<double>(steps) : 0;
}

double RunReport::tokens_per_second() const {
  return train_seconds > 0 ? target_tokens / train_seconds : 0;
}

double RunReport::flops_per_second() const {
  return train_seconds > 0 ? train_flops / train_seconds : 0;
}

std::string RunReport::mfu_unknown_reason() const {
  if (device != Device::cuda) return "CPU run";
  if (peak.flops_per_s <= 0)
    return peak.unknown_reason.empty() ? "the card's peak FLOP/s is not known"
                                       : peak.unknown_reason;
  if (steps == 0 || train_seconds <= 0) return "no steps run";
  if (train_flops <= 0) return "no FLOPs counted";
  return "";
}

std::optional<double> RunReport::mfu() const {
  if (!mfu_unknown_reason().empty()) return std::nullopt;
  return flops_per_second() / peak.flops_per_s;
}

namespace {

nlohmann::json gpu_usage_json(const GpuUsage& g) {
  auto if_known = [&](double value) {
    return g.utilization_available ? nlohmann::json(value) : nlohmann::json();
  };
  return {{"utilization_mean_percent", if_known(g.mean_utilization_percent)},
          {"utilization_max_percent", if_known(g.max_utilization_percent)},
          {"utilization_p10_percent", if_known(g.p10_utilization_percent)},
          {"memory_busy_mean_percent", if_known(g.mean_memory_busy_percent)},
          {"utilization_samples", g.samples},
          {"utilization_reason", null_if_empty(g.utilization_reason)},
          {"peak_device_memory_bytes",
           g.memory_source.empty() ? nlohmann::json() : nlohmann::json(g.peak_memory_used_bytes)},
          {"peak_device_memory_source", null_if_empty(g.memory_source)}};
}

// "12.3 TFLOP/s"
std::string format_flops(double flops_per_s) {
  const char* prefixes[] = {"", "k", "M", "G", "T", "P"};
  int i = 0;
  while (i < 5 && flops_per_s >= 1000) {
    flops_per_s /= 1000;
    ++i;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %sFLOP/s", flops_per_s, prefixes[i]);
  return text;
}

double mib(double bytes) {
  return bytes / (1 << 20);
}

// The MFU, GPU usage and dataset lines of the report.
std::string format_efficiency(const RunReport& r) {
  std::string s;
  char buf[512];
  std::string counted = format_flops(r.flops_per_second()) + " counted";
  if (std::optional<double> mfu = r.mfu())
    std::snprintf(buf, sizeof buf, "  MFU %.1f%%: %s of %s peak (%s, %s)\n", 100 * *mfu,
                  counted.c_str(), format_flops(r.peak.flops_per_s).c_str(),
                  r.peak.device_name.c_str(), r.peak.precision.c_str());
  else
    std::snprintf(buf, sizeof buf, "  MFU n/a (%s): %s\n", r.mfu_unknown_reason().c_str(),
                  counted.c_str());
  s += buf;
  if (r.gpu_usage) {
    const GpuUsage& g = *r.gpu_usage;
    if (g.utilization_available)
      std::snprintf(buf, sizeof buf, "  GPU utilisation %.1f%% mean, %.0f%% max (%lld samples)",
                    g.mean_utilization_percent, g.max_utilization_percent,
                    static_cast<long long>(g.samples));
    else
      std::snprintf(buf, sizeof buf, "  GPU utilisation n/a (%s)", g.utilization_reason.c_str());
    s += buf;
    if (!g.memory_source.empty()) {
      std::snprintf(buf, sizeof buf, "; peak device memory %.0f MiB (%s, whole device)",
                    mib(static_cast<double>(g.peak_memory_used_bytes)), g.memory_source.c_str());
      s += buf;
    }
    s += "\n";
  }
  if (r.dataset) {
    const DatasetStats& d = *r.dataset;
    std::snprintf(buf, sizeof buf, "  dataset: %lld pairs, %lld source / %lld target tokens",
                  static_cast<long long>(d.pairs), static_cast<long long>(d.source_tokens),
                  static_cast<long long>(d.target_tokens));
    s += buf;
    if (d.source_bytes && d.target_bytes) {
      std::snprintf(buf, sizeof buf, ", %.1f / %.1f MiB of text",
                    mib(static_cast<double>(*d.source_bytes)),
                    mib(static_cast<double>(*d.target_bytes)));
      s += buf;
    }
    s += " (" + d.origin + " of " + d.directory + ")\n";
  }
  return s;
}

}  // namespace

nlohmann::json to_json(const RunReport& r) {
  nlohmann::json j = {
      {"first_step", r.first_step},
      {"last_step", r.last_step},
      {"steps", r.steps},
      {"stop_reason", r.stop_reason},
      {"wall_seconds", r.wall_seconds},
      {"train_seconds", r.train_seconds},
      {"mean_step_ms", r.mean_step_ms()},
      {"mean_fwd_bwd_ms", r.steps > 0 ? 1000 * r.forward_backward_seconds / r.steps : 0.0},
      {"mean_optimizer_ms", r.steps > 0 ? 1000 * r.optimizer_seconds / r.steps : 0.0},
      {"mean_data_ms", r.steps > 0 ? 1000 * r.data_seconds / r.steps : 0.0},
      {"target_tokens", r.target_tokens},
      {"tokens_per_s", r.tokens_per_second()},
      {"parameters", r.parameters},
      {"device", std::string(config_name(r.device))},
      {"peak_memory_bytes", r.peak_memory_bytes},
      {"best_metric", nullptr},
      {"best_checkpoint", null_if_empty(r.best_checkpoint)},
      {"checkpoints", r.checkpoints},
      {"last_checkpoint", null_if_empty(r.last_checkpoint)},
      {"last_checkpoint_bytes", r.last_checkpoint_bytes},
      {"checkpoint_seconds", r.checkpoint_seconds},
      {"world_size", r.world_size},
      {"comm_bytes", r.comm_bytes},
      {"comm_seconds", r.comm_seconds},
      {"exposed_comm_seconds", r.exposed_comm_seconds},
      {"comm_algbw_gb_per_s", r.comm_seconds > 0 ? r.comm_bytes / r.comm_seconds / 1e9 : 0.0}};
  std::optional<double> mfu = r.mfu();
  j["train_flops"] = r.train_flops;
  j["flops_per_s"] = r.flops_per_second();
  j["flop_count"] = "3 x forward matmul FLOPs of the padded batches (engine/model/flop_count.h)";
  j["mfu"] = mfu ? nlohmann::json(*mfu) : nlohmann::json();
  j["mfu_reason"] = null_if_empty(r.mfu_unknown_reason());
  j["device_name"] = null_if_empty(r.peak.device_name);
  j["peak_flops_per_s"] =
      r.peak.flops_per_s > 0 ? nlohmann::json(r.peak.flops_per_s) : nlohmann::json();
  j["matmul_precision"] = null_if_empty(r.peak.precision);
  j["gpu"] = r.gpu_usage ? gpu_usage_json(*r.gpu_usage) : nlohmann::json();
  j["dataset"] = to_json(r.dataset);
  j["dev_lines"] = r.dev_lines ? nlohmann::json{{"scored", r.dev_lines->scored},
                                                {"in_file", r.dev_lines->in_file},
                                                {"truncated", r.dev_lines->truncated}}
                               : nlohmann::json();
  if (!r.ranks.is_null()) j["ranks"] = r.ranks;
  if (r.best)
    j["best_metric"] = {
        {"name", r.best->metric.name}, {"value", r.best->metric.value}, {"step", r.best->step}};
  return j;
}

std::string format_run_report(const RunReport& r) {
  char buf[640];
  std::string s;
  std::snprintf(buf, sizeof buf,
                "run report: steps %lld..%lld (%lld in this run, stopped by %s) in %.1f s\n"
                "  step time %.1f ms mean (fwd+bwd %.1f, opt %.1f), %.0f target tokens/s\n"
                "  %lld parameters, peak memory %.1f MiB on %s (model + optimizer arenas)\n",
                static_cast<long long>(r.first_step + (r.steps > 0 ? 1 : 0)),
                static_cast<long long>(r.last_step), static_cast<long long>(r.steps),
                r.stop_reason.c_str(), r.wall_seconds, r.mean_step_ms(),
                r.steps > 0 ? 1000 * r.forward_backward_seconds / r.steps : 0.0,
                r.steps > 0 ? 1000 * r.optimizer_seconds / r.steps : 0.0, r.tokens_per_second(),
                static_cast<long long>(r.parameters),
                static_cast<double>(r.peak_memory_bytes) / (1 << 20),
                std::string(config_name(r.device)).c_str());
  s += buf;
  if (r.world_size > 1) {
    // "Was the network the bottleneck?": the exchange's share of the step time, and how much of it
    // backward did not hide.
    std::snprintf(buf, sizeof buf,
                  "  gradient exchange over %d ranks: %.1f MiB per step, %.1f ms per step "
                  "(%.1f ms exposed, %.0f%% of the step), %.2f GB/s algorithm bandwidth\n",
                  r.world_size, r.steps > 0 ? r.comm_bytes / r.steps / (1 << 20) : 0.0,
                  r.steps > 0 ? 1000 * r.comm_seconds / r.steps : 0.0,
                  r.steps > 0 ? 1000 * r.exposed_comm_seconds / r.steps : 0.0,
                  r.train_seconds > 0 ? 100 * r.exposed_comm_seconds / r.train_seconds : 0.0,
                  r.comm_seconds > 0 ? r.comm_bytes / r.comm_seconds / 1e9 : 0.0);
    s += buf;
  }
  if (r.best) {
    std::snprintf(buf, sizeof buf, "  best %s %.4f at step %lld%s%s\n", r.best->metric.name.c_str(),
                  r.best->metric.value, static_cast<long long>(r.best->step),
                  r.best_checkpoint.empty() ? "" : ", best checkpoint ", r.best_checkpoint.c_str());
    s += buf;
  }
  if (r.dev_lines) {
    std::snprintf(buf, sizeof buf,
                  "  last evaluation: %lld of %lld dev lines scored, %lld sources cut to "
                  "model.max_positions\n",
                  static_cast<long long>(r.dev_lines->scored),
                  static_cast<long long>(r.dev_lines->in_file),
                  static_cast<long long>(r.dev_lines->truncated));
    s += buf;
  }
  if (r.checkpoints > 0) {
    std::snprintf(buf, sizeof buf, "  checkpoints: %lld saved in %.2f s, last %s (%.1f MiB)\n",
                  static_cast<long long>(r.checkpoints), r.checkpoint_seconds,
                  r.last_checkpoint.c_str(),
                  static_cast<double>(r.last_checkpoint_bytes) / (1 << 20));
    s += buf;
  }
  return s + format_efficiency(r);
}

// ---- RunReporter ----

RunReporter::RunReporter(const RunConfig& cfg, std::ostream& out, bool resumed)
    : out_(out),
      log_dir_(cfg.log.dir),
      config_(to_json(cfg)),
      // eval_metric()'s name: only nmt-prep data has text to score with BLEU.
      eval_metric_name_(cfg.data.train_is_synthetic() ? "greedy_token_accuracy" : "bleu") {
  if (log_dir_.empty()) return;
  std::error_code ec;
  fs::create_directories(log_dir_, ec);
  if (ec || !fs::is_directory(log_dir_))
    throw std::runtime_error("log.dir: cannot create " + log_dir_ + ": " +
                             (ec ? ec.message() : "it is not a directory"));
  metrics_ = std::make_unique<MetricsLog>(
      log_dir_ + "/metrics.jsonl", resumed ? MetricsLog::Mode::append : MetricsLog::Mode::truncate);
  if (cfg.log.tensorboard) tensorboard_ = std::make_unique<TensorBoardWriter>(log_dir_);
}

void RunReporter::log_start(nlohmann::json record) {
  record["config"] = config_;
  record["provenance"] = to_json(provenance());
  invocation_ = {{"provenance", record["provenance"]},
                 {"command_line", record.value("command_line", nlohmann::json::array())},
                 {"config", config_}};
  if (tensorboard_) {
    // The session's metrics on the hparams dashboard: the last values of these eval scalars.
    std::vector<std::string> metrics = {"eval/" + eval_metric_name_, "eval/loss"};
    tensorboard_->add_hparams(hparams_from_json(config_), metrics,
                              record.value("step", int64_t{0}));
    tensorboard_->flush();
  }
  log_record(std::move(record));
}

void RunReporter::log_record(nlohmann::json record) {
  record["time"] = unix_time();
  if (metrics_) metrics_->write(record);
}

void RunReporter::log_train(const TrainRecord& r) {
  out_ << format_train_line(r) << std::flush;
  if (metrics_) metrics_->write(train_record_json(r));
  if (tensorboard_) {
    tensorboard_->add_scalar("train/loss", r.loss, r.step);
    tensorboard_->add_scalar("train/acc", r.accuracy, r.step);
    tensorboard_->add_scalar("train/lr", r.lr, r.step);
    tensorboard_->add_scalar("train/grad_norm", r.grad_norm, r.step);
    tensorboard_->add_scalar("train/tokens_per_s", r.tokens_per_s, r.step);
    tensorboard_->add_scalar("train/step_ms", r.ms_per_step, r.step);
    tensorboard_->flush();
  }
}

void RunReporter::log_eval(int64_t step, const EvalResult& e, double seconds) {
  out_ << format_eval(step, e) << std::flush;
  if (metrics_) metrics_->write(eval_record_json(step, e, seconds));
  if (tensorboard_) {
    tensorboard_->add_scalar("eval/loss", e.loss, step);
    tensorboard_->add_scalar("eval/token_accuracy", e.token_accuracy, step);
    CheckpointMetric m = eval_metric(e);
    tensorboard_->add_scalar("eval/" + m.name, m.value, step);
    if (!e.samples.empty())
      tensorboard_->add_text("eval/samples", samples_markdown(e.samples), step);
    tensorboard_->flush();
  }
}

void RunReporter::log_checkpoint(int64_t step, const SavedCheckpoint& saved) {
  char line[160];
  std::snprintf(line, sizeof line, " (%.1f MiB in %.2f s)%s\n",
                static_cast<double>(saved.bytes) / (1 << 20), saved.seconds,
                saved.is_best ? ", best so far" : "");
  out_ << "checkpoint step " << step << ": " << saved.path << line;
  for (const std::string& w : saved.warnings) out_ << "warning: " << w << "\n";
  out_ << std::flush;
  if (metrics_)
    metrics_->write({{"event", "checkpoint"},
                     {"step", step},
                     {"path", saved.path},
                     {"bytes", saved.bytes},
                     {"seconds", saved.seconds},
                     {"is_best", saved.is_best},
                     {"files", saved.files},
                     {"time", unix_time()}});
}

void RunReporter::log_message(const std::string& line) {
  out_ << line << "\n" << std::flush;
}

void RunReporter::finish(const RunReport& report) {
  out_ << format_run_report(report) << std::flush;
  if (log_dir_.empty()) return;
  nlohmann::json j = to_json(report);
  if (metrics_) metrics_->write({{"event", "end"}, {"step", report.last_step}, {"report", j}});
  for (const auto& [key, value] : invocation_.items()) j[key] = value;
  std::string path = log_dir_ + "/report.json";
  std::string temp = log_dir_ + "/.report.json.tmp-" + std::to_string(::getpid());
  {
    std::ofstream file(temp, std::ios::trunc);
    file << j.dump(2) << "\n";
    file.close();
    if (!file) {
      std::error_code ec;
      fs::remove(temp, ec);
      throw std::runtime_error("cannot write " + temp);
    }
  }
  std::error_code ec;
  fs::rename(temp, path, ec);
  if (ec) {
    std::string why = ec.message();
    fs::remove(temp, ec);
    throw std::runtime_error("cannot rename " + temp + " to " + path + ": " + why);
  }
}

}  // namespace nmt
