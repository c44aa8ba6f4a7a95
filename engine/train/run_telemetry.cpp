// RunTelemetry: sysfs network counters, host names, gathers over ranks, and the cluster,
// telemetry and per-rank records of the run card.
#include "engine/train/run_telemetry.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <tuple>

#include "engine/train/all_reduce_probe.h"

namespace nmt {

namespace fs = std::filesystem;

namespace {

// The first whitespace-separated word of a small sysfs file, or "" when it cannot be read
// (reading `speed` of a down or virtual link fails with EINVAL).
std::string read_word(const fs::path& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word)) return "";
  return word;
}

std::optional<int64_t> read_integer(const fs::path& path) {
  std::string word = read_word(path);
  if (word.empty()) return std::nullopt;
  try {
    size_t used = 0;
    long long value = std::stoll(word, &used);
    if (used != word.size()) return std::nullopt;
    return value;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// A JSON number, or null for the "unknown" marker (negative).
nlohmann::json known_or_null(double value) {
  return value >= 0 && std::isfinite(value) ? nlohmann::json(value) : nlohmann::json();
}

double per_step(double total, int64_t steps) {
  return steps > 0 ? total / static_cast<double>(steps) : 0.0;
}

}  // namespace

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "unknown";
  return name;
}

std::vector<NetInterface> read_net_interfaces(const std::string& root) {
  std::vector<NetInterface> interfaces;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, ec)) {
    NetInterface n;
    n.name = entry.path().filename().string();
    if (n.name == "lo") continue;
    std::optional<int64_t> rx = read_integer(entry.path() / "statistics" / "rx_bytes");
    std::optional<int64_t> tx = read_integer(entry.path() / "statistics" / "tx_bytes");
    if (!rx || !tx) continue;
    n.rx_bytes = static_cast<uint64_t>(*rx);
    n.tx_bytes = static_cast<uint64_t>(*tx);
    n.speed_mbps = read_integer(entry.path() / "speed").value_or(-1);
    n.up = read_word(entry.path() / "operstate") == "up";
    interfaces.push_back(n);
  }
  std::sort(interfaces.begin(), interfaces.end(),
            [](const NetInterface& a, const NetInterface& b) { return a.name < b.name; });
  return interfaces;
}

std::vector<double> gather_over_ranks(DataParallel& dp, const std::vector<double>& mine) {
  std::vector<double> all(mine.size() * static_cast<size_t>(dp.world_size()), 0.0);
  std::copy(
      mine.begin(), mine.end(),
      all.begin() + static_cast<std::ptrdiff_t>(mine.size() * static_cast<size_t>(dp.rank())));
  return dp.sum(std::move(all));
}

std::vector<std::string> gather_strings(DataParallel& dp, const std::string& mine,
                                        size_t max_chars) {
  // One byte per double: exact, and the few hundred values cost nothing next to a step.
  std::vector<double> codes(max_chars, 0.0);
  for (size_t i = 0; i < std::min(max_chars, mine.size()); ++i)
    codes[i] = static_cast<unsigned char>(mine[i]);
  std::vector<double> all = gather_over_ranks(dp, codes);
  std::vector<std::string> strings(static_cast<size_t>(dp.world_size()));
  for (size_t r = 0; r < strings.size(); ++r)
    for (size_t i = 0; i < max_chars; ++i) {
      auto code = static_cast<int>(all[r * max_chars + i]);
      if (code == 0) break;
      strings[r] += static_cast<char>(code);
    }
  return strings;
}

RunTelemetry::RunTelemetry(DataParallel& dp, GpuMonitor* gpu, std::string net_root)
    : dp_(dp), gpu_(gpu), net_root_(std::move(net_root)) {
  hosts_ = gather_strings(dp_, host_name());
  std::tie(last_rx_, last_tx_) = node_bytes();
}

std::pair<uint64_t, uint64_t> RunTelemetry::node_bytes() const {
  uint64_t rx = 0, tx = 0;
  for (const NetInterface& n : read_net_interfaces(net_root_)) {
    rx += n.rx_bytes;
    tx += n.tx_bytes;
  }
  return {rx, tx};
}

nlohmann::json RunTelemetry::per_node(const std::vector<double>& values, size_t stride,
                                      const std::vector<std::string>& fields) const {
  nlohmann::json nodes = nlohmann::json::array();
  std::set<std::string> seen;
  for (size_t r = 0; r < hosts_.size(); ++r) {
    if (!seen.insert(hosts_[r]).second) continue;
    nlohmann::json node = {{"host", hosts_[r]}, {"rank", r}};
    for (size_t i = 0; i < fields.size(); ++i) node[fields[i]] = values[r * stride + i];
    nodes.push_back(node);
  }
  return nodes;
}

nlohmann::json RunTelemetry::cluster_record(int64_t step, Device device, double probe_mb) {
  std::vector<NetInterface> interfaces = read_net_interfaces(net_root_);
  double link_mbps = -1;  // the fastest link that is up: the most the node can send
  for (const NetInterface& n : interfaces)
    if (n.up && n.speed_mbps > 0)
      link_mbps = std::max(link_mbps, static_cast<double>(n.speed_mbps));
  std::vector<double> links = gather_over_ranks(dp_, {link_mbps});
  nlohmann::json nodes = per_node(links, 1, {"link_mbps"});
  for (nlohmann::json& node : nodes) node["link_mbps"] = known_or_null(node["link_mbps"]);
  // Interface names only for rank 0's node: strings cost a gather each.
  nlohmann::json local = nlohmann::json::array();
  for (const NetInterface& n : interfaces)
    local.push_back({{"name", n.name},
                     {"speed_mbps", known_or_null(static_cast<double>(n.speed_mbps))},
                     {"up", n.up}});
  if (!nodes.empty()) nodes[0]["interfaces"] = local;
  nlohmann::json ranks = nlohmann::json::array();
  for (size_t r = 0; r < hosts_.size(); ++r) ranks.push_back({{"rank", r}, {"host", hosts_[r]}});
  nlohmann::json record = {
      {"event", "cluster"},       {"step", step},           {"world_size", dp_.world_size()},
      {"backend", dp_.backend()}, {"ranks", ranks},         {"nodes", nodes},
      {"probe", nullptr},         {"probe_reason", nullptr}};
  if (dp_.world_size() < 2)
    record["probe_reason"] = "single process: nothing to exchange";
  else if (probe_mb <= 0)
    record["probe_reason"] = "dist.probe_mb is 0";
  else
    record["probe"] = to_json(
        probe_all_reduce(dp_.communicator(), device, static_cast<uint64_t>(probe_mb * (1 << 20))));
  last_time_ = Clock::now();
  std::tie(last_rx_, last_tx_) = node_bytes();
  return record;
}

nlohmann::json RunTelemetry::interval_record(int64_t step, const IntervalStats& s) {
  auto now = Clock::now();
  double interval_seconds = std::chrono::duration<double>(now - last_time_).count();
  auto [rx, tx] = node_bytes();
  GpuInterval g = gpu_ ? gpu_->take_interval() : GpuInterval{};
  double timed = static_cast<double>(std::max<int64_t>(s.timed_steps, 1));
  const std::vector<std::string> fields = {"ms_per_step",
                                           "fwd_bwd_ms",
                                           "optimizer_ms",
                                           "exposed_comm_ms",
                                           "comm_ms",
                                           "comm_bytes_per_step",
                                           "data_ms",
                                           "gpu_util_mean_percent",
                                           "gpu_util_min_percent",
                                           "gpu_memory_busy_percent",
                                           "gpu_samples",
                                           "rx_bytes",
                                           "tx_bytes"};
  std::vector<double> mine = {1000 * s.step_seconds / timed,
                              1000 * s.forward_backward_seconds / timed,
                              1000 * s.optimizer_seconds / timed,
                              1000 * s.exposed_comm_seconds / timed,
                              1000 * s.comm_seconds / timed,
                              s.comm_bytes / timed,
                              1000 * s.data_seconds / timed,
                              g.samples > 0 ? g.mean_utilization_percent : -1,
                              g.samples > 0 ? g.min_utilization_percent : -1,
                              g.samples > 0 ? g.mean_memory_busy_percent : -1,
                              static_cast<double>(g.samples),
                              static_cast<double>(rx - std::min(rx, last_rx_)),
                              static_cast<double>(tx - std::min(tx, last_tx_))};
  std::vector<double> all = gather_over_ranks(dp_, mine);
  const size_t stride = fields.size();
  nlohmann::json ranks = nlohmann::json::array();
  for (size_t r = 0; r * stride < all.size(); ++r) {
    nlohmann::json rank = {{"rank", r}};
    for (size_t i = 0; i + 2 < stride; ++i)  // the byte counters are per node, below
      rank[fields[i]] = fields[i].starts_with("gpu_util") || fields[i] == "gpu_memory_busy_percent"
                            ? known_or_null(all[r * stride + i])
                            : nlohmann::json(all[r * stride + i]);
    ranks.push_back(rank);
  }
  std::vector<double> bytes;
  for (size_t r = 0; r * stride < all.size(); ++r) {
    bytes.push_back(all[r * stride + stride - 2]);
    bytes.push_back(all[r * stride + stride - 1]);
  }
  nlohmann::json step_ms = nlohmann::json::array();
  for (float ms : s.step_ms) step_ms.push_back(std::round(ms * 100.0) / 100.0);  // 10 µs
  last_time_ = now;
  last_rx_ = rx;
  last_tx_ = tx;
  return {{"event", "telemetry"},
          {"step", step},
          {"interval_s", interval_seconds},
          {"steps", s.timed_steps},
          {"step_ms", step_ms},
          {"ranks", ranks},
          {"nodes", per_node(bytes, 2, {"rx_bytes", "tx_bytes"})}};
}

nlohmann::json RunTelemetry::ranks_summary(const RunReport& r) {
  std::optional<GpuUsage> g = r.gpu_usage;
  bool util = g && g->utilization_available;
  const std::vector<std::string> fields = {"mean_step_ms",
                                           "mean_fwd_bwd_ms",
                                           "mean_optimizer_ms",
                                           "mean_exposed_comm_ms",
                                           "mean_comm_ms",
                                           "mean_data_ms",
                                           "comm_bytes_per_step",
                                           "gpu_util_mean_percent",
                                           "gpu_util_p10_percent",
                                           "gpu_util_max_percent",
                                           "gpu_memory_busy_percent",
                                           "gpu_samples"};
  std::vector<double> mine = {1000 * per_step(r.train_seconds, r.steps),
                              1000 * per_step(r.forward_backward_seconds, r.steps),
                              1000 * per_step(r.optimizer_seconds, r.steps),
                              1000 * per_step(r.exposed_comm_seconds, r.steps),
                              1000 * per_step(r.comm_seconds, r.steps),
                              1000 * per_step(r.data_seconds, r.steps),
                              per_step(r.comm_bytes, r.steps),
                              util ? g->mean_utilization_percent : -1,
                              util ? g->p10_utilization_percent : -1,
                              util ? g->max_utilization_percent : -1,
                              util ? g->mean_memory_busy_percent : -1,
                              g ? static_cast<double>(g->samples) : 0.0};
  std::vector<double> all = gather_over_ranks(dp_, mine);
  nlohmann::json ranks = nlohmann::json::array();
  const size_t stride = fields.size();
  for (size_t rank = 0; rank < hosts_.size(); ++rank) {
    nlohmann::json j = {{"rank", rank}, {"host", hosts_[rank]}};
    for (size_t i = 0; i < stride; ++i)
      j[fields[i]] = fields[i].starts_with("gpu_util") || fields[i] == "gpu_memory_busy_percent"
                         ? known_or_null(all[rank * stride + i])
                         : nlohmann::json(all[rank * stride + i]);
    ranks.push_back(j);
  }
  return ranks;
}

}  // namespace nmt
