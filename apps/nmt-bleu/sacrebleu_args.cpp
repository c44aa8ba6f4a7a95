// The option tables behind sacrebleu_arguments: sacreBLEU 2.6's short spellings and the options
// nmt-bleu refuses, each with the reason a user reads.
#include "apps/nmt-bleu/sacrebleu_args.h"

#include <map>

namespace nmt {
namespace {

// sacreBLEU's single-dash multi-letter names (argparse allows them; CLI11 would read "-tok" as
// "-t ok").
const std::map<std::string, std::string>& long_spellings() {
  static const std::map<std::string, std::string> table = {
      {"-tok", "--tokenize"},       {"-lc", "--lowercase"},     {"-cc", "--chrf-char-order"},
      {"-cw", "--chrf-word-order"}, {"-nr", "--num-refs"},      {"-sl", "--sentence-level"},
      {"-sv", "--smooth-value"},    {"-sh", "--short"},         {"-nc", "--no-color"},
      {"-ci", "--confidence"},      {"-cin", "--confidence-n"}, {"-par", "--paired-ar"},
      {"-pbs", "--paired-bs"},      {"-parn", "--paired-ar-n"}, {"-pbsn", "--paired-bs-n"},
      {"-ol", "--origlang"},        {"-V", "--version"},        {"-d", "--detail"},
      {"-l", "--language-pair"},    {"-j", "--paired-jobs"},    {"-q", "--quiet"}};
  return table;
}

// The options refused, by their long name, with why.
const std::map<std::string, std::string>& unsupported() {
  static const std::string test_sets =
      "sacreBLEU's built-in test sets are not supported: give the reference files as arguments";
  static const std::string significance =
      "confidence intervals and paired significance tests are not supported";
  static const std::map<std::string, std::string> table = {
      {"--language-pair", test_sets},
      {"--list", test_sets},
      {"--citation", test_sets},
      {"--cite", test_sets},
      {"--download", test_sets},
      {"--echo", test_sets},
      {"--origlang", test_sets},
      {"--subset", test_sets},
      {"--detail", test_sets},
      {"--test-set", test_sets},
      {"--sentence-level", "sentence-level scores are not supported (corpus scores only)"},
      {"--smooth-value", "only BLEU's default smoothing (exp) is supported"},
      {"--short", "short signatures are not supported"},
      {"--confidence", significance},
      {"--confidence-n", significance},
      {"--paired-ar", significance},
      {"--paired-bs", significance},
      {"--paired-ar-n", significance},
      {"--paired-bs-n", significance},
      {"--paired-jobs", significance},
      {"--ter-case-sensitive", "TER is not supported (metrics: bleu, chrf)"},
      {"--ter-asian-support", "TER is not supported (metrics: bleu, chrf)"},
      {"--ter-no-punct", "TER is not supported (metrics: bleu, chrf)"},
      {"--ter-normalized", "TER is not supported (metrics: bleu, chrf)"}};
  return table;
}

bool is_tokenizer_name(const std::string& value) {
  return value == "13a" || value == "intl" || value == "none" || value == "char";
}

}  // namespace

std::vector<std::string> sacrebleu_arguments(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    const size_t equals = arg.find('=');
    std::string name = arg.substr(0, equals);
    if (auto it = long_spellings().find(name); it != long_spellings().end()) {
      name = it->second;
      arg = equals == std::string::npos ? name : name + arg.substr(equals);
    }
    // -t is sacreBLEU's --test-set and nmt-bleu's older short name for --tokenize: a tokenizer
    // name after it keeps the old meaning.
    if (name == "-t" || name == "--test-set") {
      const std::string value = equals != std::string::npos ? arg.substr(equals + 1)
                                : i + 1 < argc              ? argv[i + 1]
                                                            : "";
      if (name == "-t" && is_tokenizer_name(value)) {
        out.push_back(arg);
        continue;
      }
      throw UnsupportedOption(name + " " + value + ": " + unsupported().at("--test-set"));
    }
    if (auto it = unsupported().find(name); it != unsupported().end())
      throw UnsupportedOption(name + ": " + it->second + " (docs/scoring.md)");
    out.push_back(arg);
  }
  return out;
}

}  // namespace nmt
