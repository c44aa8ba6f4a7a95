// bench-decode's real-data rows (bench/bench-decode/decode_rows.h): batch names both ways and
// their errors, nearest-rank percentiles, the median latency of ~30-token sources, and the JSON
// row's rates and nulls (bench/torch_decode.py writes the same fields), and the CUDA-graph line.
#include <stdexcept>
#include <vector>

#include "bench/bench-decode/decode_rows.h"
#include "bench/bench-decode/graph_summary.h"
#include "test/support/catch.h"

namespace bd = nmt::bench_decode;

TEST_CASE("bench-decode batch sizes: numbers and all", "[bench]") {
  CHECK(bd::parse_batch("1") == 1);
  CHECK(bd::parse_batch("32") == 32);
  CHECK(bd::parse_batch("all") == 0);
  CHECK(bd::batch_name(0) == "all");
  CHECK(bd::batch_name(32) == "32");
  for (const char* bad : {"0", "-3", "x", "4x", ""})
    CHECK_THROWS_AS(bd::parse_batch(bad), std::invalid_argument);
}

TEST_CASE("bench-decode percentiles are nearest-rank", "[bench]") {
  CHECK_FALSE(bd::percentile({}, 50).has_value());
  CHECK(*bd::percentile({3, 1, 2}, 50) == 2);
  CHECK(*bd::percentile({5}, 90) == 5);
  std::vector<double> ten{10, 9, 8, 7, 6, 5, 4, 3, 2, 1};
  CHECK(*bd::percentile(ten, 50) == 5);
  CHECK(*bd::percentile(ten, 90) == 9);
  CHECK(*bd::percentile(ten, 100) == 10);
}

TEST_CASE("bench-decode rows: rates, latencies, nulls", "[bench]") {
  bd::DecodeRow row;
  row.beam = 4;
  row.batch = 1;
  row.sentences = 4;
  row.target_tokens = 120;
  row.seconds = 2.0;
  row.bleu = 31.5;
  row.latencies = {0.010, 0.030, 0.020, 0.500};
  row.latency_source_tokens = {28, 32, 31, 33};  // 33 is outside 30 +- 2
  bd::LatencyAt at30 = bd::latency_at_length(row);
  CHECK(at30.sentences == 3);
  CHECK(*at30.seconds == Approx(0.020));
  nlohmann::json j = bd::row_json(row);
  CHECK(j["batch"] == "1");
  CHECK(j["target_tokens_per_s"].get<double>() == Approx(60));
  CHECK(j["sentences_per_s"].get<double>() == Approx(2));
  CHECK(j["bleu"].get<double>() == Approx(31.5));
  CHECK(j["latency_p50_ms"].get<double>() == Approx(20));
  CHECK(j["latency_p90_ms"].get<double>() == Approx(500));
  CHECK(j["latency_30_ms"].get<double>() == Approx(20));

  bd::DecodeRow all;  // batch "all", no references, no latencies
  all.beam = 1;
  all.sentences = 10;
  all.seconds = 0.5;
  nlohmann::json k = bd::row_json(all);
  CHECK(k["batch"] == "all");
  CHECK(k["bleu"].is_null());
  CHECK(k["latency_p50_ms"].is_null());
  CHECK(k["latency_30_ms"].is_null());
  CHECK(k["latency_30_sentences"] == 0);
  CHECK(k["sentences_per_s"].get<double>() == Approx(20));
}

TEST_CASE("bench-decode says whether CUDA graphs were on and what they did", "[bench]") {
  nmt::StepGraphStats stats;
  stats.eager_steps = 11;
  stats.captures = 4;
  stats.replays = 120;
  stats.graph_nodes = 187;
  stats.reorders = nmt::StepGraphCounts{3, 2, 90};
  CHECK(bd::graphs_summary(true, stats) ==
        "CUDA graphs on: 120 of 131 steps replayed from 4 graphs (187 nodes each), 11 eager; "
        "reorders: 90 replayed from 2 graphs, 3 eager");
  CHECK(bd::graphs_summary(false, nmt::StepGraphStats{}) == "CUDA graphs off");
  stats.failure = "CUDA error: operation not permitted when stream is capturing";
  CHECK(bd::graphs_summary(true, stats) ==
        "CUDA graphs on, given up: CUDA error: operation not permitted when stream is capturing");
}
