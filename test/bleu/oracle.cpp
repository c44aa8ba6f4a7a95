// Runs the sacreBLEU oracle script into a scratch directory and parses its expected.json.
#include "test/bleu/oracle.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>

#include "data/bleu.h"
#include "test/support/lib/scratch_dir.h"

namespace nmt::test {
namespace {

constexpr int kExitCommandNotFound = 127;
constexpr int kExitSacrebleuMissing = 3;  // sacrebleu_oracle.py's own code

// Scratch directories of this process, removed at exit.
struct ScratchDirs {
  std::vector<std::string> paths;
  ~ScratchDirs() {
    for (const std::string& path : paths) {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  }
};
ScratchDirs& scratch_dirs() {
  static ScratchDirs dirs;
  return dirs;
}

// The last non-empty line of a command's output (the error line of a Python traceback).
std::string last_line(const std::string& output) {
  const size_t end = output.find_last_not_of("\n");
  if (end == std::string::npos) return "";
  const size_t start = output.rfind('\n', end);
  return output.substr(start == std::string::npos ? 0 : start + 1,
                       end - (start == std::string::npos ? 0 : start + 1) + 1);
}

// The committed fixture (scripts/gen-bleu-fixtures.sh): sacreBLEU's results for the same
// variants, for machines without Python or sacreBLEU.
nlohmann::json load_fixture(const std::string& why) {
  const std::string path = "test/bleu/fixtures/expected.json";
  std::ifstream file(path);
  if (!file)
    throw std::runtime_error(why + ", and the fixture " + path +
                             " is missing: run scripts/install-deps.sh");
  std::fprintf(stderr, "note: %s; checking against the committed fixture %s\n", why.c_str(),
               path.c_str());
  return nlohmann::json::parse(file);
}

nlohmann::json run_oracle() {
  const std::string data_dir = nmt::test::shared_data_dir();
  std::string output;
  const int status = run_command("python3 -c 'import sacrebleu'", output);
  if (status == kExitCommandNotFound) return load_fixture("python3 not found");
  if (status != 0)
    return load_fixture("sacrebleu is not installed for python3 (" + last_line(output) + ")");
  if (!std::filesystem::is_directory(data_dir))
    return load_fixture("the dev corpora " + data_dir + " are missing");
  const std::string out_dir = make_scratch_dir("nmt-bleu-oracle");
  const int oracle_status = run_command(
      "python3 test/bleu/sacrebleu_oracle.py --data " + data_dir + " --out " + out_dir, output);
  if (oracle_status == kExitSacrebleuMissing) {
    throw std::runtime_error(output + " (run scripts/install-deps.sh)");
  }
  if (oracle_status != 0) {
    throw std::runtime_error("test/bleu/sacrebleu_oracle.py failed with status " +
                             std::to_string(oracle_status) + ":\n" + output);
  }
  std::ifstream file(out_dir + "/expected.json");
  if (!file) throw std::runtime_error("the oracle wrote no " + out_dir + "/expected.json");
  return nlohmann::json::parse(file);
}

}  // namespace

std::string as_our_signature(const std::string& sacrebleu_signature) {
  const std::string theirs = std::string("|version:") + kSacreBleuVersion;
  if (!sacrebleu_signature.ends_with(theirs)) return sacrebleu_signature + " (not sacreBLEU's)";
  return sacrebleu_signature.substr(0, sacrebleu_signature.size() - theirs.size()) +
         "|version:" + metric_signature_version();
}

int run_command(const std::string& command, std::string& output) {
  output.clear();
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("cannot run: " + command);
  char buffer[4096];
  size_t count = 0;
  while ((count = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, count);
  const int status = pclose(pipe);
  if (status == -1) throw std::runtime_error("cannot wait for: " + command);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string make_scratch_dir(const std::string& prefix) {
  std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("cannot create a scratch directory like " + pattern);
  }
  scratch_dirs().paths.push_back(pattern);
  return pattern;
}

const nlohmann::json& sacrebleu_oracle() {
  static const nlohmann::json expected = run_oracle();
  return expected;
}

}  // namespace nmt::test
