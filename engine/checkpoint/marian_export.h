// Export of a checkpoint in Marian's file format (model.npz + vocab.yml), which CTranslate2's
// Marian converter reads, with the SentencePiece model alongside: names, layouts and the three
// points where our Transformer differs from Marian's are in docs/export.md;
// scripts/ct2_nmt_converter.py is the conversion that accounts for them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nmt {

struct MarianExportOptions {
  std::string checkpoint;  // a checkpoint directory (ckpt-<step>, or one nmt-average wrote)
  std::string out;         // the export directory: created; must not exist yet
  std::string vocab;       // "" = the vocabulary recorded in the checkpoint's state.json
};

struct MarianExportResult {
  std::vector<std::string> files;  // written, relative to out
  int64_t tensors = 0;             // arrays in model.npz
  int64_t step = 0;                // the checkpoint's step
};

// File names inside an export directory.
inline constexpr const char* kMarianModelFile = "model.npz";
inline constexpr const char* kMarianVocabFile = "vocab.yml";
inline constexpr const char* kExportInfoFile = "export.json";

// Writes model.npz (every weight, transposed to Marian's [in, out] where Marian stores that way,
// plus "Wpos": the exact position table [model.max_positions, d_model] and "special:model.yml"),
// vocab.yml (every piece with its id), a copy of the vocabulary file and export.json (what the
// conversion must set: layer norm epsilon, no source </s>, the decoder starts from <s>'s embedding)
// into `out`, through a temporary directory renamed at the end: `out` is complete or absent.
// Every tensor of the checkpoint must be exported (a name it does not know is an error, never
// dropped). Throws std::invalid_argument (bad options, `out` exists, a piece vocab.yml cannot
// carry) and CheckpointError (missing, corrupt or mismatched checkpoint or vocabulary).
MarianExportResult export_marian(const MarianExportOptions& options);

// One vocab.yml line for a piece ("\"piece\": id"), quoted so that both YAML and CTranslate2's
// own vocab.yml reader give the piece back; throws std::invalid_argument for a piece neither can
// carry (a line break, or a leading "\x" that the reader would take for an escape).
std::string marian_vocab_line(const std::string& piece, int64_t id);

}  // namespace nmt
