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

// sacreBLEU's signature with its version field ("version:2.6.0", which must be the release we
// reproduce) replaced by ours (nmt::metric_signature_version()); the other fields stay as they are.
std::string as_our_signature(const std::string& sacrebleu_signature);

// Runs a shell command, returning its exit status and its stdout and stderr together.
int run_command(const std::string& command, std::string& output);

// A fresh directory under the system temp directory, removed when the process exits.
std::string make_scratch_dir(const std::string& prefix);

}  // namespace nmt::test
