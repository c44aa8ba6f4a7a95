// The nmt-bleu command line: its output equals the library's, JSON output, and input errors
// (line-count mismatch, missing file, invalid UTF-8) give one message and exit code 2.
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/bleu.h"
#include "data/bleu_io.h"
#include "data/chrf.h"
#include "test/bleu/oracle.h"
#include "test/support/catch.h"
#include "test/support/lib/scratch_dir.h"

namespace {

const std::string kRefPath = nmt::test::shared_data_dir() + "/lohelp-en-de/dev.de";

std::string scratch_dir() {
  static const std::string dir = nmt::test::make_scratch_dir("nmt-bleu-cli");
  return dir;
}

std::string write_file(const std::string& name, const std::vector<std::string>& lines) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream file(path, std::ios::binary);
  for (const std::string& line : lines) file << line << '\n';
  return path;
}

// Every line of the reference with its last word dropped.
std::string write_hypothesis() {
  std::vector<std::string> hyps = nmt::read_metric_lines(kRefPath);
  for (std::string& line : hyps) {
    const size_t space = line.rfind(' ');
    if (space != std::string::npos) line.resize(space);
  }
  return write_file("hyp.txt", hyps);
}

int nmt_bleu(const std::string& arguments, std::string& output) {
  return nmt::test::run_command(std::string(NMT_BLEU_EXE) + " " + arguments, output);
}

}  // namespace

TEST_CASE("nmt-bleu prints the library's BLEU and chrF lines and signatures") {
  const std::string hyp_path = write_hypothesis();
  const std::vector<std::string> hyps = nmt::read_metric_lines(hyp_path);
  const std::vector<std::string> refs = nmt::read_metric_lines(kRefPath);
  std::string output;

  nmt::BleuOptions options;
  options.tokenizer = nmt::BleuTokenizer::kIntl;
  options.lowercase = true;
  const nmt::BleuStats bleu = nmt::corpus_bleu(hyps, refs, options);
  REQUIRE(nmt_bleu("--ref " + kRefPath + " --hyp " + hyp_path + " --tokenize intl --lowercase",
                   output) == 0);
  CHECK(output == bleu.format(2) + "\n" + bleu.signature() + "\n");

  const nmt::ChrfStats chrf = nmt::corpus_chrf(hyps, refs);
  REQUIRE(nmt_bleu("-r " + kRefPath + " -i " + hyp_path + " --metric chrf", output) == 0);
  CHECK(output == chrf.format(2) + "\n" + chrf.signature() + "\n");
}

TEST_CASE("nmt-bleu --json gives the statistics in one object") {
  const std::string hyp_path = write_hypothesis();
  const nmt::BleuStats bleu =
      nmt::corpus_bleu(nmt::read_metric_lines(hyp_path), nmt::read_metric_lines(kRefPath));
  std::string output;
  REQUIRE(nmt_bleu("--ref " + kRefPath + " --hyp " + hyp_path + " --json", output) == 0);
  const nlohmann::json result = nlohmann::json::parse(output);
  CHECK(result["name"] == "BLEU");
  CHECK(std::abs(result["score"].get<double>() - bleu.score) <= 1e-12);
  CHECK(result["counts"].get<std::vector<int64_t>>() ==
        std::vector<int64_t>(bleu.counts.begin(), bleu.counts.end()));
  CHECK(result["totals"].get<std::vector<int64_t>>() ==
        std::vector<int64_t>(bleu.totals.begin(), bleu.totals.end()));
  CHECK(std::abs(result["bp"].get<double>() - bleu.bp) <= 1e-9);
  CHECK(result["sys_len"] == bleu.sys_len);
  CHECK(result["ref_len"] == bleu.ref_len);
  CHECK(result["signature"] ==
        "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" + nmt::metric_signature_version());
  CHECK(result["version"] == nmt::metric_signature_version());
  CHECK(result["tok"] == "13a");

  REQUIRE(nmt_bleu("--ref " + kRefPath + " --ref " + kRefPath + " --hyp " + hyp_path +
                       " --metric chrf --chrf-word-order 2 --json",
                   output) == 0);
  const nlohmann::json chrf = nlohmann::json::parse(output);
  CHECK(chrf["name"] == "chrF2++");
  CHECK(chrf["nrefs"] == "2");
}

TEST_CASE("nmt-bleu input errors: one message, exit code 2") {
  const std::string two_lines = write_file("two.txt", {"a b c", "d e f"});
  const std::string three_lines = write_file("three.txt", {"a b c", "d e f", "g"});
  const std::string bad_utf8 = write_file("bad.txt", {"fine", "broken \xC3("});
  std::string output;

  CHECK(nmt_bleu("--ref " + two_lines + " --hyp " + three_lines, output) == 2);
  CHECK(output == "nmt-bleu: error: line count mismatch: " + three_lines + " has 3 lines but " +
                      two_lines + " has 2\n");

  CHECK(nmt_bleu("--ref " + scratch_dir() + "/missing.txt --hyp " + two_lines, output) == 2);
  CHECK(output == "nmt-bleu: error: cannot open " + scratch_dir() +
                      "/missing.txt: No such file or directory\n");

  CHECK(nmt_bleu("--ref " + two_lines + " --hyp " + bad_utf8, output) == 2);
  CHECK(output == "nmt-bleu: error: " + bad_utf8 + " line 2: invalid UTF-8 at byte 8\n");

  CHECK(nmt_bleu("--ref " + two_lines + " --hyp " + two_lines + " --tokenize zh", output) != 0);
  CHECK(output.find("--tokenize") != std::string::npos);
  CHECK(nmt_bleu("--hyp " + two_lines, output) != 0);
  CHECK(output.find("--ref") != std::string::npos);
}
