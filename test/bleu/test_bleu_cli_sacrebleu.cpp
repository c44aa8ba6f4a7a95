// nmt-bleu with sacreBLEU's command line: the same arguments run through the real sacrebleu
// (Python package; the case is skipped with a warning without it) and through nmt-bleu print the
// same scores, JSON fields and text lines (the version field aside); sacreBLEU options nmt-bleu
// does not support give one message naming them and exit code 2.
#include <algorithm>
#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include "data/bleu_io.h"
#include "test/bleu/oracle.h"
#include "test/support/catch.h"
#include "test/support/lib/scratch_dir.h"

namespace {

const std::string kRefPath = nmt::test::shared_data_dir() + "/lohelp-en-de/dev.de";

struct Files {
  std::string dir, ref, ref2, hyp;
};

// The first 400 dev lines as the reference, a second reference with one word changed, and a
// hypothesis that drops the last word of each line (sacreBLEU's own inputs would do as well).
const Files& files() {
  static const Files f = [] {
    Files out;
    out.dir = nmt::test::make_scratch_dir("nmt-bleu-sacrebleu");
    std::vector<std::string> refs = nmt::read_metric_lines(kRefPath);
    refs.resize(std::min<size_t>(refs.size(), 400));
    std::vector<std::string> refs2 = refs, hyps = refs;
    for (std::string& line : refs2) line = std::regex_replace(line, std::regex(" der "), " die ");
    for (std::string& line : hyps)
      if (size_t space = line.rfind(' '); space != std::string::npos) line.resize(space);
    auto write = [&](const std::string& name, const std::vector<std::string>& lines) {
      std::string text;
      for (const std::string& line : lines) text += line + "\n";
      const std::string path = out.dir + "/" + name;
      FILE* file = std::fopen(path.c_str(), "wb");
      std::fwrite(text.data(), 1, text.size(), file);
      std::fclose(file);
      return path;
    };
    out.ref = write("ref.txt", refs);
    out.ref2 = write("ref2.txt", refs2);
    out.hyp = write("hyp.txt", hyps);
    return out;
  }();
  return f;
}

// stdout of `program args` (stderr dropped: sacreBLEU logs warnings there), the version field of
// the signatures replaced by "V" so the two tools compare.
std::string stdout_of(const std::string& program, const std::string& args, int& code) {
  std::string output;
  code = nmt::test::run_command("{ " + program + " " + args + " 2>/dev/null; }", output);
  output = std::regex_replace(output, std::regex("version:[^|\"\\n]*"), "version:V");
  return std::regex_replace(output, std::regex("\"version\": \"[^\"]*\""), "\"version\": \"V\"");
}

bool sacrebleu_available() {
  std::string output;
  return nmt::test::run_command("python3 -c 'import sacrebleu'", output) == 0;
}

}  // namespace

TEST_CASE("nmt-bleu prints what sacrebleu prints for the same command line", "[bleu][sacrebleu]") {
  if (!sacrebleu_available()) {
    WARN("skipped: the Python package sacrebleu is not installed");
    return;
  }
  const Files& f = files();
  const std::vector<std::string> command_lines = {
      f.ref + " < " + f.hyp,  // JSON, the hypothesis from stdin
      f.ref + " -i " + f.hyp + " -m bleu chrf",
      f.ref + " -i " + f.hyp + " -m bleu chrf -f text",
      f.ref + " -i " + f.hyp + " -b",
      f.ref + " -i " + f.hyp + " -m chrf bleu -b -w 3",
      f.ref + " -i " + f.hyp + " -m bleu chrf -b -f text",
      f.ref + " " + f.ref2 + " -i " + f.hyp + " -tok intl -lc -w 4 -f text",
      f.ref + " " + f.ref2 + " -i " + f.hyp + " --tokenize char -f json",
      f.ref + " -i " + f.hyp + " -m chrf -cw 2 -lc -f text",
      f.ref + " -i " + f.hyp + " -m chrf --chrf-lowercase --chrf-whitespace --format json",
      f.ref + " --input " + f.hyp + " -m bleu -tok none --score-only --width 2",
  };
  for (const std::string& args : command_lines) {
    INFO("arguments: " << args);
    int sacrebleu_code = 0, ours_code = 0;
    const std::string theirs = stdout_of("python3 -m sacrebleu", args, sacrebleu_code);
    const std::string ours = stdout_of(NMT_BLEU_EXE, args, ours_code);
    REQUIRE(sacrebleu_code == 0);
    CHECK(ours_code == 0);
    CHECK(ours == theirs);
    CHECK(!ours.empty());
  }
}

TEST_CASE("nmt-bleu names the sacreBLEU options it does not support", "[bleu]") {
  const Files& f = files();
  const std::string base = f.ref + " -i " + f.hyp;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"-t wmt14 -l en-de -i " + f.hyp, "-t wmt14: sacreBLEU's built-in test sets"},
      {base + " --confidence", "--confidence: confidence intervals"},
      {base + " -sl", "--sentence-level: sentence-level scores are not supported"},
      {base + " -m ter", "-m ter: not supported (metrics: bleu, chrf)"},
      {base + " -tok zh", "--tokenize zh: not supported"},
      {base + " -f latex", "-f latex:"},
      {base + " " + f.hyp, "-i/--input: several systems are not supported"},
      {base + " -nr 2", "--num-refs 2: tab-separated references are not supported"},
      {base + " -s floor", "--smooth-method floor: only exp"},
  };
  for (const auto& [args, message] : cases) {
    INFO("arguments: " << args);
    std::string output;
    CHECK(nmt::test::run_command(std::string(NMT_BLEU_EXE) + " " + args, output) == 2);
    CHECK(output.starts_with("nmt-bleu: error: " + message));
    CHECK(std::count(output.begin(), output.end(), '\n') == 1);
  }
}
