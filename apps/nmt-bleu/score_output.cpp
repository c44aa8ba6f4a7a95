// Score printing for nmt-bleu: sacreBLEU's JSON (insertion-ordered fields, scores rounded to the
// width, one object or a list of them), its text lines aligned on " = ", and the older formats.
#include "apps/nmt-bleu/score_output.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

namespace nmt {
namespace {

std::string fixed(double value, int width) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", width, value);
  return buffer;
}

// The score as sacreBLEU's JSON has it: float(f"{score:.{width}f}").
double rounded(double value, int width) {
  return std::strtod(fixed(value, width).c_str(), nullptr);
}

double score_of(const MetricResult& r) {
  return r.bleu ? r.bleu->score : r.chrf->score;
}
std::string name_of(const MetricResult& r) {
  return r.bleu ? "BLEU" : r.chrf->name();
}
std::string signature_of(const MetricResult& r) {
  return r.bleu ? r.bleu->signature() : r.chrf->signature();
}

// The signature's key:value pairs as fields of `out`.
template <typename Json>
void add_signature_fields(Json& out, const std::string& signature) {
  size_t start = 0;
  while (start <= signature.size()) {
    size_t end = signature.find('|', start);
    if (end == std::string::npos) end = signature.size();
    const std::string pair = signature.substr(start, end - start);
    const size_t colon = pair.find(':');
    if (colon != std::string::npos) out[pair.substr(0, colon)] = pair.substr(colon + 1);
    start = end + 1;
  }
}

std::string sacrebleu_json(const MetricResult& r, int width) {
  nlohmann::ordered_json out;
  out["name"] = name_of(r);
  out["score"] = rounded(score_of(r), width);
  out["signature"] = signature_of(r);
  if (r.bleu) out["verbose_score"] = r.bleu->verbose();
  add_signature_fields(out, signature_of(r));
  return out.dump(1);
}

std::string sacrebleu_text(const MetricResult& r, int width) {
  std::string line = name_of(r) + "|" + signature_of(r) + " = " + fixed(score_of(r), width);
  if (r.bleu) line += " " + r.bleu->verbose();
  return line;
}

// Code points of a UTF-8 string (Python's len, which sacreBLEU aligns by).
size_t code_points(const std::string& text, size_t bytes) {
  size_t count = 0;
  for (size_t i = 0; i < bytes; ++i)
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) ++count;
  return count;
}

}  // namespace

std::string format_sacrebleu(const std::vector<MetricResult>& results, ScoreFormat format,
                             int width, bool score_only) {
  std::vector<std::string> items;
  for (const MetricResult& r : results)
    items.push_back(score_only                    ? fixed(score_of(r), width)
                    : format == ScoreFormat::json ? sacrebleu_json(r, width)
                                                  : sacrebleu_text(r, width));
  std::string out;
  if (format == ScoreFormat::json && items.size() > 1) {
    out = "[\n";
    for (size_t i = 0; i < items.size(); ++i)
      out += items[i] + (i + 1 < items.size() ? ",\n" : "\n");
    return out + "]\n";
  }
  if (format == ScoreFormat::json || score_only || items.size() == 1) {
    for (const std::string& item : items) out += item + "\n";
    return out;
  }
  // Several text lines: right-align what precedes " = ", as sacreBLEU does.
  size_t widest = 0;
  for (const std::string& item : items)
    widest = std::max(widest, code_points(item, item.find(" = ")));
  for (const std::string& item : items) {
    const size_t split = item.find(" = ");
    out += std::string(widest - code_points(item, split), ' ') + item + "\n";
  }
  return out;
}

std::string format_legacy(const MetricResult& r, bool json, int width) {
  if (!json) {
    const std::string line = r.bleu ? r.bleu->format(width) : r.chrf->format(width);
    return line + "\n" + signature_of(r) + "\n";
  }
  nlohmann::json out;
  out["name"] = name_of(r);
  out["score"] = score_of(r);
  out["signature"] = signature_of(r);
  if (r.bleu) {
    const BleuStats& bleu = *r.bleu;
    out["verbose_score"] = bleu.verbose();
    out["counts"] = bleu.counts;
    out["totals"] = bleu.totals;
    out["precisions"] = bleu.precisions;
    out["bp"] = bleu.bp;
    out["ratio"] = bleu.ratio();
    out["sys_len"] = bleu.sys_len;
    out["ref_len"] = bleu.ref_len;
  } else {
    out["stats"] = r.chrf->stats;
    out["beta"] = r.chrf->options.beta;
  }
  add_signature_fields(out, signature_of(r));
  return out.dump(1) + "\n";
}

}  // namespace nmt
