// BLEU, chrF, the tokenizers and lowercasing against sacreBLEU itself (the oracle script's
// expected.json): exact counts and formatted lines, scores to 1e-9.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "data/bleu.h"
#include "data/bleu_io.h"
#include "data/bleu_text.h"
#include "data/chrf.h"
#include "test/bleu/oracle.h"
#include "test/support/catch.h"

namespace {

using nlohmann::json;

// sacreBLEU's doubles come out bit-identical here; the margin only absorbs libm differences.
constexpr double kScoreMargin = 1e-9;

const std::vector<std::string>& lines_of(const std::string& path) {
  static std::map<std::string, std::vector<std::string>> cache;
  auto found = cache.find(path);
  if (found == cache.end()) found = cache.emplace(path, nmt::read_metric_lines(path)).first;
  return found->second;
}

template <size_t N>
std::vector<int64_t> as_vector(const std::array<int64_t, N>& values) {
  return std::vector<int64_t>(values.begin(), values.end());
}

void check_bleu(const nmt::BleuStats& bleu, const json& expected) {
  CHECK(as_vector(bleu.counts) == expected["counts"].get<std::vector<int64_t>>());
  CHECK(as_vector(bleu.totals) == expected["totals"].get<std::vector<int64_t>>());
  CHECK(bleu.sys_len == expected["sys_len"].get<int64_t>());
  CHECK(bleu.ref_len == expected["ref_len"].get<int64_t>());
  CHECK(std::abs(bleu.score - expected["score"].get<double>()) <= kScoreMargin);
  CHECK(bleu.signature() == nmt::test::as_our_signature(expected["signature"]));
}

// "" when equal, else where the strings first differ with a little context (the code point sweep
// lines are too long to print whole).
std::string first_difference(const std::string& got, const std::string& expected) {
  if (got == expected) return "";
  size_t at = 0;
  while (at < got.size() && at < expected.size() && got[at] == expected[at]) ++at;
  const size_t from = at > 20 ? at - 20 : 0;
  return "first difference at byte " + std::to_string(at) + ": got '" + got.substr(from, 60) +
         "' expected '" + expected.substr(from, 60) + "'";
}

}  // namespace

TEST_CASE("corpus BLEU and chrF match sacreBLEU on variants of the dev sets") {
  const json& oracle = nmt::test::sacrebleu_oracle();
  REQUIRE(oracle["sacrebleu_version"].get<std::string>() == nmt::kSacreBleuVersion);
  REQUIRE(oracle["corpus"].size() > 400);
  for (const json& expected : oracle["corpus"]) {
    const std::string metric = expected["metric"];
    INFO(expected["name"].get<std::string>()
         << " " << metric << " tok=" << expected.value("tokenize", "-")
         << " lc=" << expected["lowercase"].get<bool>());
    // A named string, not a temporary: gcc 13 warned that the returned reference might dangle.
    const std::string hyp_file = expected["hyp_file"];
    const std::vector<std::string>& hyps = lines_of(hyp_file);
    std::vector<std::vector<std::string>> ref_streams;
    for (const json& path : expected["ref_files"]) ref_streams.push_back(lines_of(path));
    if (metric == "bleu") {
      nmt::BleuOptions options;
      options.tokenizer = nmt::parse_bleu_tokenizer(expected["tokenize"].get<std::string>());
      options.lowercase = expected["lowercase"];
      const nmt::BleuStats bleu = nmt::corpus_bleu(hyps, ref_streams, options);
      check_bleu(bleu, expected);
      CHECK(std::abs(bleu.bp - expected["bp"].get<double>()) <= kScoreMargin);
      CHECK(bleu.format(2) == expected["format"].get<std::string>());
    } else {
      nmt::ChrfOptions options;
      options.lowercase = expected["lowercase"];
      options.word_order = expected["word_order"];
      const nmt::ChrfStats chrf = nmt::corpus_chrf(hyps, ref_streams, options);
      CHECK(std::abs(chrf.score - expected["score"].get<double>()) <= kScoreMargin);
      CHECK(chrf.signature() == nmt::test::as_our_signature(expected["signature"]));
      CHECK(chrf.format(2) == expected["format"].get<std::string>());
    }
  }
}

TEST_CASE("sentence BLEU (effective order) and sentence chrF match sacreBLEU") {
  const json& oracle = nmt::test::sacrebleu_oracle();
  REQUIRE(oracle["sentence"].size() > 600);
  for (const json& expected : oracle["sentence"]) {
    const std::string hyp = expected["hyp"];
    const std::vector<std::string> refs = expected["refs"];
    INFO("hyp: " << hyp << "\nref: " << refs[0]);
    if (expected["metric"] == "bleu") {
      nmt::BleuOptions options = nmt::sentence_bleu_options();
      options.tokenizer = nmt::parse_bleu_tokenizer(expected["tokenize"].get<std::string>());
      check_bleu(nmt::sentence_bleu(hyp, refs, options), expected);
    } else {
      const nmt::ChrfStats chrf = nmt::sentence_chrf(hyp, refs);
      CHECK(std::abs(chrf.score - expected["score"].get<double>()) <= kScoreMargin);
      CHECK(chrf.signature() == nmt::test::as_our_signature(expected["signature"]));
    }
  }
}

TEST_CASE("tokenizers and lowercasing match sacreBLEU character for character") {
  namespace text = nmt::bleu_text;
  const json& oracle = nmt::test::sacrebleu_oracle();
  REQUIRE(oracle["tokenize"].size() > 100);
  for (const json& expected : oracle["tokenize"]) {
    const std::string line = expected["line"];
    const bool lowercase = expected["lowercase"];
    INFO("tok=" << expected["tokenize"].get<std::string>() << " lc=" << lowercase
                << " line: " << line.substr(0, 200));
    // sacreBLEU's BLEU._preprocess_segment: lowercase, rstrip, tokenize.
    std::u32string decoded = text::decode_utf8(line, "oracle line");
    if (lowercase) decoded = text::python_lower(decoded);
    const auto tokenizer = nmt::parse_bleu_tokenizer(expected["tokenize"].get<std::string>());
    const std::string tokenized =
        text::encode_utf8(nmt::bleu_tokenize(text::python_rstrip(decoded), tokenizer));
    CHECK(first_difference(tokenized, expected["expected"]) == "");
  }
  for (const json& expected : oracle["lower"]) {
    const std::string line = expected["line"];
    INFO("line: " << line.substr(0, 200));
    const std::string lowered =
        text::encode_utf8(text::python_lower(text::decode_utf8(line, "oracle line")));
    CHECK(first_difference(lowered, expected["expected"]) == "");
  }
}
