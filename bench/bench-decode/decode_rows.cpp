// DecodeRow summaries: batch names, percentiles, the ~30-token latency, JSON and the table.
#include "bench/bench-decode/decode_rows.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace nmt::bench_decode {

int64_t parse_batch(const std::string& text) {
  if (text == "all") return 0;
  size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || value < 1)
    throw std::invalid_argument("--batches: '" + text +
                                "' is not a batch size (a positive number or 'all')");
  return value;
}

std::string batch_name(int64_t batch) {
  return batch == 0 ? "all" : std::to_string(batch);
}

std::optional<double> percentile(std::vector<double> values, double p) {
  if (values.empty()) return std::nullopt;
  std::sort(values.begin(), values.end());
  auto rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(values.size())));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

LatencyAt latency_at_length(const DecodeRow& row) {
  std::vector<double> near;
  for (size_t i = 0; i < row.latencies.size() && i < row.latency_source_tokens.size(); ++i)
    if (std::abs(row.latency_source_tokens[i] - kLatencyTokens) <= kLatencyTokensSlack)
      near.push_back(row.latencies[i]);
  return {percentile(near, 50), static_cast<int64_t>(near.size())};
}

namespace {

nlohmann::json milliseconds(std::optional<double> seconds) {
  return seconds ? nlohmann::json(*seconds * 1e3) : nlohmann::json(nullptr);
}

std::string cell(const nlohmann::json& value, const char* format) {
  if (value.is_null()) return "-";
  char text[32];
  std::snprintf(text, sizeof text, format, value.get<double>());
  return text;
}

}  // namespace

nlohmann::json row_json(const DecodeRow& row) {
  const double seconds = std::max(row.seconds, 1e-12);
  const LatencyAt at30 = latency_at_length(row);
  nlohmann::json out;
  out["beam"] = row.beam;
  out["batch"] = batch_name(row.batch);
  out["sentences"] = row.sentences;
  out["seconds"] = row.seconds;
  out["target_tokens"] = row.target_tokens;
  out["target_tokens_per_s"] = static_cast<double>(row.target_tokens) / seconds;
  out["sentences_per_s"] = static_cast<double>(row.sentences) / seconds;
  out["bleu"] = row.bleu ? nlohmann::json(*row.bleu) : nlohmann::json(nullptr);
  out["latency_p50_ms"] = milliseconds(percentile(row.latencies, 50));
  out["latency_p90_ms"] = milliseconds(percentile(row.latencies, 90));
  out["latency_30_ms"] = milliseconds(at30.seconds);
  out["latency_30_sentences"] = at30.sentences;
  return out;
}

void print_table(std::FILE* out, const std::string& title, const nlohmann::json& rows) {
  std::fprintf(out, "%s\n", title.c_str());
  std::fprintf(out, "%5s %6s %9s %8s %11s %9s %7s %8s %8s %13s\n", "beam", "batch", "sentences",
               "seconds", "tgt tok/s", "sent/s", "BLEU", "p50 ms", "p90 ms", "30-tok ms (n)");
  for (const nlohmann::json& r : rows) {
    std::string at30 = cell(r["latency_30_ms"], "%.2f");
    if (!r["latency_30_ms"].is_null())
      at30 += " (" + std::to_string(r["latency_30_sentences"].get<int64_t>()) + ")";
    std::fprintf(out, "%5lld %6s %9lld %8.3f %11.0f %9.1f %7s %8s %8s %13s\n",
                 static_cast<long long>(r["beam"].get<int64_t>()),
                 r["batch"].get<std::string>().c_str(),
                 static_cast<long long>(r["sentences"].get<int64_t>()), r["seconds"].get<double>(),
                 r["target_tokens_per_s"].get<double>(), r["sentences_per_s"].get<double>(),
                 cell(r["bleu"], "%.2f").c_str(), cell(r["latency_p50_ms"], "%.2f").c_str(),
                 cell(r["latency_p90_ms"], "%.2f").c_str(), at30.c_str());
  }
}

}  // namespace nmt::bench_decode
