// nmt-report: turns a run directory (nmt-train's log.dir: metrics.jsonl, report.json) into the run
// card, card.md and card.html with its plots, by running scripts/run_card.py.
//   nmt-report RUN_DIR [-o OUT_DIR] [--no-plots] [--quiet]      nmt-report --version
// Works on finished, stopped and crashed runs (the card names what is missing). Exit codes: those
// of run_card.py (0 written, 1 bad input), 127 when python3 cannot be started.
#include <iostream>
#include <string>
#include <vector>

#include "engine/report/run_card_command.h"
#include "version/provenance.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 1 && args[0] == "--version") {
    std::cout << nmt::format_version("nmt-report", nmt::provenance()) << "\n";
    return 0;
  }
  std::string why;
  int code = nmt::run_python_script(nmt::run_card_script(NMT_RUN_CARD_SCRIPT), args, why);
  if (!why.empty()) std::cerr << "nmt-report: " << why << "\n";
  return code;
}
