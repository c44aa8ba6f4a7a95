// RunTelemetry on one process: the network counters read from a fake /sys/class/net, the gather
// over ranks (trivial alone), the cluster record without a probe, and the interval record's step
// times and byte-counter deltas.
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/train/data_parallel.h"
#include "engine/train/run_telemetry.h"
#include "test/support/catch.h"
#include "test/support/lib/scratch_dir.h"

namespace fs = std::filesystem;
using nmt::test::ScratchDir;

namespace {

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// An interface directory as sysfs lays it out; speed "" leaves the file out (a virtual link).
void add_interface(const ScratchDir& root, const std::string& name, uint64_t rx, uint64_t tx,
                   const std::string& speed, const std::string& state) {
  fs::path dir = fs::path(root.path()) / name;
  write_text(dir / "statistics" / "rx_bytes", std::to_string(rx) + "\n");
  write_text(dir / "statistics" / "tx_bytes", std::to_string(tx) + "\n");
  if (!speed.empty()) write_text(dir / "speed", speed + "\n");
  write_text(dir / "operstate", state + "\n");
}

}  // namespace

TEST_CASE("read_net_interfaces reads sysfs counters, speeds and states, skipping lo",
          "[reporting][telemetry]") {
  ScratchDir root("nmt-net");
  add_interface(root, "lo", 5, 5, "", "unknown");
  add_interface(root, "ib0", 1000, 2000, "200000", "up");
  add_interface(root, "eth0", 10, 20, "-1", "down");
  add_interface(root, "veth1", 7, 8, "", "up");
  fs::create_directories(fs::path(root.path()) / "bonding_masters_dir");  // no statistics
  std::vector<nmt::NetInterface> n = nmt::read_net_interfaces(root.path());
  REQUIRE(n.size() == 3);
  CHECK(n[0].name == "eth0");
  CHECK(n[0].speed_mbps == -1);
  CHECK_FALSE(n[0].up);
  CHECK(n[1].name == "ib0");
  CHECK(n[1].rx_bytes == 1000);
  CHECK(n[1].tx_bytes == 2000);
  CHECK(n[1].speed_mbps == 200000);
  CHECK(n[1].up);
  CHECK(n[2].name == "veth1");
  CHECK(n[2].speed_mbps == -1);
  CHECK(nmt::read_net_interfaces(root.file("missing")).empty());
}

TEST_CASE("RunTelemetry records one process: no probe, step times, counter deltas",
          "[reporting][telemetry]") {
  ScratchDir root("nmt-net");
  add_interface(root, "ib0", 1000, 2000, "100000", "up");
  nmt::DataParallel dp(nmt::DistConfig{}, nmt::Device::cpu, /*allow_mpi=*/false);
  CHECK(nmt::gather_over_ranks(dp, {1.5, 2.5}) == std::vector<double>{1.5, 2.5});
  CHECK(nmt::gather_strings(dp, "node-a", 4) == std::vector<std::string>{"node"});
  nmt::RunTelemetry telemetry(dp, nullptr, root.path());

  nlohmann::json cluster = telemetry.cluster_record(0, nmt::Device::cpu, 64);
  CHECK(cluster["event"] == "cluster");
  CHECK(cluster["world_size"] == 1);
  CHECK(cluster["probe"].is_null());
  CHECK(cluster["probe_reason"] == "single process: nothing to exchange");
  REQUIRE(cluster["nodes"].size() == 1);
  CHECK(cluster["nodes"][0]["host"] == nmt::host_name());
  CHECK(cluster["nodes"][0]["link_mbps"] == 100000.0);
  CHECK(cluster["nodes"][0]["interfaces"][0]["name"] == "ib0");

  add_interface(root, "ib0", 1500, 2600, "100000", "up");  // 500 received, 600 sent since
  nmt::IntervalStats interval;
  nmt::StepTimes step;
  step.step_seconds = 0.010;
  step.forward_backward_seconds = 0.008;
  step.data_seconds = 0.001;
  interval.add_timing(step, 100);
  step.step_seconds = 0.030;
  interval.add_timing(step, 100);
  nlohmann::json record = telemetry.interval_record(20, interval);
  CHECK(record["event"] == "telemetry");
  CHECK(record["steps"] == 2);
  CHECK(record["step_ms"] == nlohmann::json({10.0, 30.0}));
  REQUIRE(record["ranks"].size() == 1);
  CHECK(record["ranks"][0]["ms_per_step"].get<double>() == Approx(20.0));
  CHECK(record["ranks"][0]["fwd_bwd_ms"].get<double>() == Approx(8.0));
  CHECK(record["ranks"][0]["data_ms"].get<double>() == Approx(1.0));
  CHECK(record["ranks"][0]["gpu_util_mean_percent"].is_null());
  REQUIRE(record["nodes"].size() == 1);
  CHECK(record["nodes"][0]["rx_bytes"] == 500.0);
  CHECK(record["nodes"][0]["tx_bytes"] == 600.0);
  CHECK(record["interval_s"].get<double>() >= 0);

  nmt::RunReport report;
  report.steps = 2;
  report.train_seconds = 0.04;
  report.data_seconds = 0.002;
  nlohmann::json ranks = telemetry.ranks_summary(report);
  REQUIRE(ranks.size() == 1);
  CHECK(ranks[0]["mean_step_ms"].get<double>() == Approx(20.0));
  CHECK(ranks[0]["mean_data_ms"].get<double>() == Approx(1.0));
  CHECK(ranks[0]["gpu_util_p10_percent"].is_null());
}
