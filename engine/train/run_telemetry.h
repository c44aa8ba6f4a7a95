// RunTelemetry: the numbers only the trainer can see, per rank and per node, for the run card
// (scripts/run_card.py): host names, the network interfaces' byte counters
// (/sys/class/net/*/statistics) and link speeds, the start-up all-reduce probe, and per log
// interval each rank's step-time split and NVML utilisation. Every rank calls the same methods at
// the same steps (they gather over ranks with DataParallel::sum); rank 0 writes the records.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/train/data_parallel.h"
#include "engine/report/gpu_monitor.h"
#include "engine/report/run_report.h"

namespace nmt {

// gethostname(), or "unknown".
std::string host_name();

struct NetInterface {
  std::string name;  // "eth0", "ib0", ...
  uint64_t rx_bytes = 0, tx_bytes = 0;
  int64_t speed_mbps = -1;  // the link speed the driver reports; -1 unknown (virtual, down)
  bool up = false;          // operstate "up"
};
// The interfaces under `root` (normally /sys/class/net) except the loopback, sorted by name;
// empty when the directory is unreadable (not Linux, a container without sysfs).
std::vector<NetInterface> read_net_interfaces(const std::string& root = "/sys/class/net");

// Every rank's `mine` (the same length on all ranks), rank after rank: a sum over ranks in which
// each rank fills only its own slot. Collective.
std::vector<double> gather_over_ranks(DataParallel& dp, const std::vector<double>& mine);
// Every rank's string (at most `max_chars` bytes of it), by rank. Collective.
std::vector<std::string> gather_strings(DataParallel& dp, const std::string& mine,
                                        size_t max_chars = 64);

class RunTelemetry {
 public:
  // gpu: the run's monitor (started), or nullptr on the CPU.
  RunTelemetry(DataParallel& dp, GpuMonitor* gpu, std::string net_root = "/sys/class/net");

  // {"event": "cluster", "step", "world_size", "backend", "ranks": [{rank, host}],
  //  "nodes": [{host, link_mbps, interfaces: [{name, speed_mbps, up}]}], "probe": {...} | null,
  //  "probe_reason"}. A node is a host name; its numbers come from its lowest rank. Runs the
  //  all-reduce probe of `probe_mb` MiB on `device` (several ranks only).
  nlohmann::json cluster_record(int64_t step, Device device, double probe_mb);

  // {"event": "telemetry", "step", "interval_s", "step_ms": [this rank's steps],
  //  "ranks": [{rank, ms_per_step, fwd_bwd_ms, optimizer_ms, exposed_comm_ms, comm_ms,
  //             comm_bytes_per_step, data_ms, gpu_util_mean_percent, gpu_util_min_percent,
  //             gpu_memory_busy_percent, gpu_samples}],
  //  "nodes": [{host, rx_bytes, tx_bytes}]}: byte counter deltas since the previous record.
  nlohmann::json interval_record(int64_t step, const IntervalStats& interval);

  // Each rank's whole-run numbers for report.json "ranks": [{rank, host, mean_step_ms,
  // mean_fwd_bwd_ms, mean_optimizer_ms, mean_exposed_comm_ms, mean_comm_ms, mean_data_ms,
  // comm_bytes_per_step, gpu_util_mean_percent, gpu_util_p10_percent, gpu_util_max_percent,
  // gpu_memory_busy_percent, gpu_samples}].
  nlohmann::json ranks_summary(const RunReport& report);

 private:
  using Clock = std::chrono::steady_clock;
  // This node's non-loopback byte counters, summed.
  std::pair<uint64_t, uint64_t> node_bytes() const;
  // One entry per host (its lowest rank): {host, <field>: values[rank * stride + i]...}.
  nlohmann::json per_node(const std::vector<double>& values, size_t stride,
                          const std::vector<std::string>& fields) const;

  DataParallel& dp_;
  GpuMonitor* gpu_;
  std::string net_root_;
  std::vector<std::string> hosts_;  // by rank, from cluster_record (or the first record)
  uint64_t last_rx_ = 0, last_tx_ = 0;
  Clock::time_point last_time_ = Clock::now();
};

}  // namespace nmt
