// metrics.jsonl: one JSON object per line, appended, readable after every call.
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "engine/report/metrics_log.h"
#include "test/checkpoint/python_oracle.h"
#include "test/support/catch.h"

using nmt::test::error_of;
using nmt::test::ScratchDir;

namespace {

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace

TEST_CASE("MetricsLog writes one JSON object per line, visible after each call", "[reporting]") {
  ScratchDir dir("nmt-metrics");
  std::string path = dir.path() + "/run/metrics.jsonl";  // the directory is created
  {
    nmt::MetricsLog log(path);
    log.write({{"step", 10}, {"loss", 3.25}, {"lr", 1e-4}});
    CHECK(read_lines(path).size() == 1);  // flushed without closing
    log.write({{"step", 20},
               {"loss", std::numeric_limits<double>::quiet_NaN()},
               {"sample", "bad \xff utf-8"}});
    std::vector<nlohmann::json> lines = read_lines(path);
    REQUIRE(lines.size() == 2);
    CHECK(lines[0]["loss"] == 3.25);
    CHECK(lines[1]["loss"].is_null());  // JSON has no NaN
    CHECK(lines[1]["step"] == 20);
    CHECK(error_of([&] {
            log.write(nlohmann::json::array({1, 2}));
          }).find("JSON object") != std::string::npos);
  }
  {
    nmt::MetricsLog resumed(path);  // append: a resumed run continues the file
    resumed.write({{"step", 30}});
  }
  CHECK(read_lines(path).size() == 3);
  {
    nmt::MetricsLog fresh(path, nmt::MetricsLog::Mode::truncate);
    fresh.write({{"step", 1}});
  }
  CHECK(read_lines(path).size() == 1);
  std::ofstream(dir.path() + "/file") << "x";
  CHECK(error_of([&] {
          nmt::MetricsLog bad(dir.path() + "/file/metrics.jsonl");
        }).find(dir.path() + "/file/metrics.jsonl") != std::string::npos);
}
