// The sacreBLEU oracle: runs test/bleu/sacrebleu_oracle.py once per test process (it writes
// hypothesis variants of the dev sets and sacreBLEU's scores for them) and hands out the result.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace nmt::test {

// expected.json of the oracle run; where python3, sacrebleu or ../shared/data is missing, the
// committed fixture test/bleu/fixtures/expected.json (scripts/gen-bleu-fixtures.sh) instead.
const nlohmann::json& sacrebleu_oracle();

// Runs a shell command, returning its exit status and its stdout and stderr together.
int run_command(const std::string& command, std::string& output);

// A fresh directory under the system temp directory, removed when the process exits.
std::string make_scratch_dir(const std::string& prefix);

}  // namespace nmt::test
