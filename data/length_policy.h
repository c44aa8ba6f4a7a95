// LengthPolicy: what happens to a sentence pair longer than the configured maximum lengths.
#pragma once

#include <cstdint>

namespace nmt {

enum class LengthPolicy : uint8_t { kDrop, kTruncate };

}  // namespace nmt
