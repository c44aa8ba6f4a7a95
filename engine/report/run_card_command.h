// Running scripts/run_card.py (the run card: card.md, card.html and plots of a run directory) as
// a child process: the nmt-report program, and nmt-train at the end of a run, where a missing
// python3 or a failing card must never fail the training.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace nmt {

// $NMT_RUN_CARD_SCRIPT when set, else `built_in` (the source tree's scripts/run_card.py, which
// each program compiles in).
std::string run_card_script(const std::string& built_in);

// Runs `python3 script args...` with the same stdout/stderr and waits for it. Returns its exit
// status; 127 when python3 cannot be started (`why` says so), 128 + N when signal N ended it.
int run_python_script(const std::string& script, const std::vector<std::string>& args,
                      std::string& why);

// nmt-train's end of run: writes the card into `run_dir` and reports in one line; never throws.
void write_run_card_quietly(const std::string& script, const std::string& run_dir,
                            std::ostream& out);

}  // namespace nmt
