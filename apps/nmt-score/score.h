// Scoring sentence pairs with a checkpoint: one batch through Transformer::evaluate (summed loss
// without label smoothing) and, per sentence, Transformer::decode_last_logits over the full target
// prefix (bos + target), written as JSON for comparison with another implementation.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kernels/tensor.h"

namespace nmt {

struct ScoreOptions {
  std::string checkpoint;  // a ckpt-<step> directory
  std::string source_file, target_file;
  bool ids = false;              // lines are space-separated token ids, not text
  std::string vocab;             // text input: "" = the vocabulary recorded in the checkpoint
  std::optional<Device> device;  // unset: cuda when a GPU is visible
};

// Token ids of each line (no bos/eos). Ids: every token an integer in [kFirstRegularId or unk,
// vocab); text: encoded with `vocab_file`. Throws std::invalid_argument naming file and line.
std::vector<std::vector<int32_t>> read_id_lines(const std::string& path, int64_t vocab_size);
std::vector<std::vector<int32_t>> read_text_lines(const std::string& path,
                                                  const std::string& vocab_file);

// {"checkpoint", "step", "device", "vocab_size", "sentences", "src_len", "tgt_len", "loss", "nll",
//  "tokens", "correct", "src_ids", "tgt_ids", "last_logits" [sentences][vocab], "eos_nll"}.
nlohmann::json score_pairs(const ScoreOptions& options);

}  // namespace nmt
