// bench-decode's real-data results: one DecodeRow per (beam, batch size) run, the summary numbers
// derived from it (target tokens/s, sentences/s, latency percentiles, the ~30-token sentence's
// latency), the final table and the --json document. bench/torch_decode.py prints and writes the
// same fields, so the two tables read side by side (docs/perf.md).
#pragma once

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace nmt::bench_decode {

// Sources of this many tokens (give or take kLatencyTokensSlack) make the "30-token sentence"
// whose batch-1 latency the table reports (issue 18's latency target).
inline constexpr int64_t kLatencyTokens = 30;
inline constexpr int64_t kLatencyTokensSlack = 2;

struct DecodeRow {
  int64_t beam = 1;
  int64_t batch = 0;           // sentences per search call; 0 = "all" (as many as the plan admits)
  int64_t sentences = 0;       // lines decoded (empty sources included)
  int64_t target_tokens = 0;   // of the best hypotheses, eos excluded (as CTranslate2 counts)
  double seconds = 0;          // search calls only: no loading, tokenising or detokenising
  std::optional<double> bleu;  // corpus BLEU (sacreBLEU 13a) of the decoded lines, if references
  // Batch 1 only: [sentences] seconds of each sentence's search call, and its source tokens.
  std::vector<double> latencies;
  std::vector<int64_t> latency_source_tokens;
};

// "1", "32", "all" -> 1, 32, 0. Throws std::invalid_argument naming the value otherwise.
int64_t parse_batch(const std::string& text);
std::string batch_name(int64_t batch);

// The nearest-rank percentile (0 < p <= 100) of `values`; nullopt when empty.
std::optional<double> percentile(std::vector<double> values, double p);

// The median batch-1 latency of the sentences whose source has kLatencyTokens +- slack tokens,
// and how many there were (0: none, nullopt).
struct LatencyAt {
  std::optional<double> seconds;
  int64_t sentences = 0;
};
LatencyAt latency_at_length(const DecodeRow& row);

// One row as JSON: beam, batch ("1", "32", "all"), sentences, seconds, target_tokens,
// target_tokens_per_s, sentences_per_s, bleu, latency_p50_ms, latency_p90_ms, latency_30_ms,
// latency_30_sentences (null where not measured).
nlohmann::json row_json(const DecodeRow& row);

// The table, one line per row of `rows` (row_json objects), headed by `title`.
void print_table(std::FILE* out, const std::string& title, const nlohmann::json& rows);

}  // namespace nmt::bench_decode
