// The special token ids every vocabulary of this project uses (nmt-prep trains SentencePiece with
// exactly these), so batches, the model and decoding agree without asking the vocabulary.
#pragma once

#include <cstdint>

namespace nmt {

inline constexpr int32_t kPadId = 0;
inline constexpr int32_t kUnkId = 1;
inline constexpr int32_t kBosId = 2;
inline constexpr int32_t kEosId = 3;
inline constexpr int32_t kFirstRegularId = 4;

}  // namespace nmt
