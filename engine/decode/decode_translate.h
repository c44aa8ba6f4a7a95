// Translating text with a checkpoint, the library behind nmt-translate: model and vocabulary from
// the checkpoint, input lines encoded, beam-searched in length-sorted batches, detokenized back
// into input order, with progress lines (rate and ETA); n-best lists with scores; a Translator that
// loads a checkpoint once for many calls (nmt-translate's streaming mode).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
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
  // Decoder rows per step (sentences * beam * prefix length); 0 = decode_step_rows: larger groups
  // on a roomy GPU, where a step's launches, not its rows, set its time.
  int64_t step_rows = 0;
  std::optional<Device> device;  // unset: cuda when a GPU is visible, else cpu
  // The weights' and activations' dtype while decoding. Unset: bf16 on the GPU (half the memory
  // traffic of f32, what the model trained in on our GPU configs), f32 on the CPU (its only one).
  std::optional<DType> dtype;
};

// The step rows a translation plans for where none are asked: 16384 on a GPU with at least 16 GiB
// free (879 Bible dev lines at beam 4 in 1.08 s and 6.6 GB on an H100, against 1.86 s and 2.4 GB
// at 4096), else 4096 (the CPU, a smaller GPU, or free_bytes 0: the runtime could not tell).
int64_t decode_step_rows(Device device, size_t free_bytes);

// The dtype a translation computes in: `requested`, else bf16 on cuda and f32 on cpu. Throws
// std::invalid_argument naming --dtype for a half dtype on the CPU or an integer dtype.
DType decode_dtype(std::optional<DType> requested, Device device);

struct TranslateStats {
  int64_t lines = 0;
  int64_t empty = 0;      // lines that encode to no tokens: passed through as empty lines
  int64_t truncated = 0;  // sources cut to the model's max_positions
  int64_t source_tokens = 0;
  int64_t output_tokens = 0;
  double seconds = 0;  // decoding only (model load excluded)
};

// One hypothesis of an n-best list, detokenized.
struct ScoredTranslation {
  std::string text;
  double score = 0;  // the beam's ranking: log-probability / length penalty (higher is better)
};

// A checkpoint and its vocabulary loaded once, for translating many calls' lines (one line at a
// time in nmt-translate's streaming mode). The model is planned by the first call for its longest
// line and planned again when a later call brings a longer one; plan_for_any_source() plans once
// for the longest the model takes (model.max_positions), so no call replans.
class Translator {
 public:
  // Throws std::invalid_argument for bad options or a missing vocabulary, CheckpointError for a
  // missing or corrupt checkpoint. The checkpoint line goes to `progress` when the model is built.
  Translator(const TranslateOptions& options, std::ostream* progress = nullptr);
  ~Translator();
  Translator(const Translator&) = delete;
  Translator& operator=(const Translator&) = delete;

  void plan_for_any_source();

  // Up to `nbest` (1..beam) hypotheses per line, best first, in input order; an empty line (no
  // tokens) gets one empty hypothesis scored 0. Progress lines (lines done, rate, ETA) go to
  // `progress` when set. Throws std::invalid_argument naming the line for invalid UTF-8.
  std::vector<std::vector<ScoredTranslation>> translate(const std::vector<std::string>& lines,
                                                        int nbest = 1,
                                                        std::ostream* progress = nullptr,
                                                        TranslateStats* stats = nullptr);

 private:
  struct Loaded;
  std::unique_ptr<Loaded> loaded_;
};

// "nmt-translate: 120/300 lines | 15.2 sentences/s | 410 tokens/s | eta 12 s": `done` of `total`
// lines after `s.seconds` of decoding; the ETA is the remaining lines at the rate so far.
std::string translate_progress_line(const TranslateStats& s, int64_t done, int64_t total);

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
