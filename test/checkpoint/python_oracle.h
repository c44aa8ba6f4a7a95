// Test helper shared by the checkpoint and reporting suites: running a Python oracle script (the
// safetensors / tensorboard packages).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "test/support/lib/scratch_dir.h"

namespace nmt::test {

// Runs `python3 <script> <args>` from the repository root; the script writes its answer as JSON
// to the file named by its last argument. Throws std::runtime_error (failing the test case) when
// python3 or a package is missing ("run scripts/install-deps.sh") or the script fails.
nlohmann::json run_python_oracle(const std::string& script, const std::string& args,
                                 const std::string& scratch_dir);

}  // namespace nmt::test
