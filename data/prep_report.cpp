// The dataset report of nmt-prep: JSON (report.json, fields in docs/data.md) and a text table.
#include <cstdio>
#include <sstream>

#include "data/prep.h"

namespace nmt {

namespace {

nlohmann::ordered_json drops_to_json(const DropCounts& d) {
  return {{"invalid_utf8", d.invalid_utf8},
          {"empty", d.empty},
          {"too_long", d.too_long},
          {"length_ratio", d.length_ratio},
          {"total", d.total()}};
}

nlohmann::ordered_json side_to_json(const SideReport& s) {
  return {{"text_file", s.text_file},  {"shard", s.shard_file}, {"shard_bytes", s.shard_bytes},
          {"tokens", s.tokens},        {"bytes", s.bytes},      {"unk_tokens", s.unk_tokens},
          {"max_length", s.max_length}};
}

nlohmann::ordered_json split_to_json(const SplitReport& r) {
  return {{"pairs_read", r.pairs_read},          {"pairs_kept", r.pairs_kept},
          {"dropped", drops_to_json(r.dropped)}, {"flagged", drops_to_json(r.flagged)},
          {"source", side_to_json(r.source)},    {"target", side_to_json(r.target)}};
}

std::string hex64(uint64_t v) {
  char text[19];
  std::snprintf(text, sizeof(text), "0x%016llx", static_cast<unsigned long long>(v));
  return text;
}

void table_row(std::ostringstream& out, const std::string& label, int64_t train,
               const SplitReport* dev, int64_t dev_value) {
  char line[128];
  if (dev != nullptr)
    std::snprintf(line, sizeof(line), "  %-22s %14lld %14lld\n", label.c_str(),
                  static_cast<long long>(train), static_cast<long long>(dev_value));
  else
    std::snprintf(line, sizeof(line), "  %-22s %14lld\n", label.c_str(),
                  static_cast<long long>(train));
  out << line;
}

}  // namespace

nlohmann::ordered_json report_to_json(const PrepReport& r) {
  const PrepOptions& o = r.options;
  nlohmann::ordered_json splits = {{"train", split_to_json(r.train)}};
  if (r.dev) splits["dev"] = split_to_json(*r.dev);
  return {
      {"format", "nmt-prep report 1"},
      {"vocab",
       {{"kind", r.vocab_kind},
        {"file", r.vocab_file},
        {"size", r.vocab_size},
        {"fingerprint", hex64(r.vocab_fingerprint)},
        {"special_ids", {{"pad", kPadId}, {"unk", kUnkId}, {"bos", kBosId}, {"eos", kEosId}}}}},
      {"options",
       {{"vocab_input", o.vocab_path},
        {"vocab_size", o.spm.vocab_size},
        {"character_coverage", o.spm.character_coverage},
        {"input_sentence_size", o.spm.input_sentence_size},
        {"max_length", o.max_length},
        {"max_ratio", o.max_ratio}}},
      {"splits", splits},
      {"seconds",
       {{"vocab", r.seconds_vocab}, {"encode", r.seconds_encode}, {"total", r.seconds_total}}},
  };
}

std::string format_report(const PrepReport& r) {
  std::ostringstream out;
  const SplitReport* dev = r.dev ? &*r.dev : nullptr;
  out << "vocabulary: " << r.vocab_file << " (" << r.vocab_kind << ", " << r.vocab_size
      << " pieces, pad=0 unk=1 bos=2 eos=3)\n";
  char header[128];
  if (dev != nullptr)
    std::snprintf(header, sizeof(header), "  %-22s %14s %14s\n", "", "train", "dev (kept all)");
  else
    std::snprintf(header, sizeof(header), "  %-22s %14s\n", "", "train");
  out << header;
  auto row = [&](const std::string& label, auto field) {
    table_row(out, label, field(r.train), dev, dev ? field(*dev) : 0);
  };
  row("pairs read", [](const SplitReport& s) { return s.pairs_read; });
  row("pairs kept", [](const SplitReport& s) { return s.pairs_kept; });
  // Train drops pairs; dev keeps them and only flags them, so the dev column shows flags.
  auto reason = [&](const std::string& label, int64_t DropCounts::*field) {
    table_row(out, label, r.train.dropped.*field, dev, dev ? dev->flagged.*field : 0);
  };
  reason("dropped: invalid utf-8", &DropCounts::invalid_utf8);
  reason("dropped: empty side", &DropCounts::empty);
  reason("dropped: too long", &DropCounts::too_long);
  reason("dropped: length ratio", &DropCounts::length_ratio);
  row("source tokens", [](const SplitReport& s) { return s.source.tokens; });
  row("target tokens", [](const SplitReport& s) { return s.target.tokens; });
  row("source bytes", [](const SplitReport& s) { return s.source.bytes; });
  row("target bytes", [](const SplitReport& s) { return s.target.bytes; });
  row("source <unk> tokens", [](const SplitReport& s) { return s.source.unk_tokens; });
  row("target <unk> tokens", [](const SplitReport& s) { return s.target.unk_tokens; });
  row("source max length", [](const SplitReport& s) { return s.source.max_length; });
  row("target max length", [](const SplitReport& s) { return s.target.max_length; });
  row("source shard bytes",
      [](const SplitReport& s) { return static_cast<int64_t>(s.source.shard_bytes); });
  row("target shard bytes",
      [](const SplitReport& s) { return static_cast<int64_t>(s.target.shard_bytes); });
  char timing[128];
  std::snprintf(timing, sizeof(timing), "time: vocabulary %.1f s, encoding %.1f s, total %.1f s\n",
                r.seconds_vocab, r.seconds_encode, r.seconds_total);
  out << timing;
  return out.str();
}

}  // namespace nmt
