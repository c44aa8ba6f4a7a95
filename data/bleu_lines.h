// Scoring a corpus's segments on every CPU thread: BLEU's and chrF's per-segment statistics are
// integers, summed in line order afterwards, so a score is the same bits on any thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <vector>

namespace nmt::bleu_text {

// Below this many lines a corpus is scored on the calling thread (starting threads costs more).
inline constexpr int64_t kParallelLines = 64;

// Calls segment(i) for each line i in [0, lines), on the OpenMP threads. Where lines throw (an
// invalid UTF-8 line), the lowest line's exception is rethrown, the one a loop in line order
// would have stopped at.
template <typename Segment>
void for_each_line(size_t lines, const Segment& segment) {
  std::vector<std::exception_ptr> errors(lines);
  const auto count = static_cast<int64_t>(lines);
#pragma omp parallel for schedule(dynamic, 16) if (count >= kParallelLines)
  for (int64_t i = 0; i < count; ++i) {
    try {
      segment(static_cast<size_t>(i));
    } catch (...) {
      errors[static_cast<size_t>(i)] = std::current_exception();
    }
  }
  for (const std::exception_ptr& error : errors)
    if (error) std::rethrow_exception(error);
}

}  // namespace nmt::bleu_text
