// Translating text with a checkpoint, the library behind nmt-translate: model and vocabulary from
// the checkpoint, input lines encoded, beam-searched in length-sorted batches, detokenized back
// into input order, with progress lines.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "engine/decode/decode.h"
#include "kernels/tensor.h"

namespace nmt {

struct TranslateOptions {
  std::string checkpoint;  // a ckpt-<step> directory
  std::string vocab;       // "" = the vocabulary path recorded in the checkpoint's state.json
  BeamOptions beam;
  int64_t step_rows = 4096;      // decoder rows per step: sentences * beam * prefix length
  std::optional<Device> device;  // unset: cuda when a GPU is visible, else cpu
};

struct TranslateStats {
  int64_t lines = 0;
  int64_t empty = 0;      // lines that encode to no tokens: passed through as empty lines
  int64_t truncated = 0;  // sources cut to the model's max_positions
  int64_t source_tokens = 0;
  int64_t output_tokens = 0;
  double seconds = 0;  // decoding only (model load excluded)
};

// One detokenized translation per input line (UTF-8, no '\n'), in input order. A trailing '\r' of a
// line is ignored. Progress goes to `progress` when set. Throws std::invalid_argument naming the
// line for invalid UTF-8 or a bad option, CheckpointError for a missing, corrupt or mismatched
// checkpoint or vocabulary.
std::vector<std::string> translate_lines(const TranslateOptions& options,
                                         const std::vector<std::string>& lines,
                                         std::ostream* progress = nullptr,
                                         TranslateStats* stats = nullptr);

// cuda when the CUDA runtime reports a device, else cpu.
Device default_decode_device();

}  // namespace nmt
