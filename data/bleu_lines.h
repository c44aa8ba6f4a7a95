// Scoring a corpus's segments on every CPU thread: BLEU's and chrF's per-segment statistics are
// integers, summed in line order afterwards, so a score is the same bits on any thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>
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

// A corpus's per-segment statistics in line order: segment(i, refs) for each hypothesis line i,
// refs pointing at line i of every reference stream, through for_each_line. `metric` names the
// caller in its errors: std::invalid_argument without reference streams or where a stream's line
// count is not the hypotheses'.
template <typename Segment>
auto score_segments(const char* metric, const std::vector<std::string>& hyps,
                    const std::vector<std::vector<std::string>>& ref_streams,
                    const Segment& segment) {
  using Refs = std::vector<const std::string*>;
  using Stats = decltype(segment(size_t{0}, std::declval<const Refs&>()));
  const std::string name = metric;
  if (ref_streams.empty()) throw std::invalid_argument(name + ": no references given");
  for (size_t k = 0; k < ref_streams.size(); ++k) {
    if (ref_streams[k].size() != hyps.size()) {
      throw std::invalid_argument(name + ": " + std::to_string(hyps.size()) +
                                  " hypotheses but reference set " + std::to_string(k + 1) +
                                  " has " + std::to_string(ref_streams[k].size()) + " lines");
    }
  }
  std::vector<Stats> segments(hyps.size());
  for_each_line(hyps.size(), [&](size_t i) {
    Refs refs(ref_streams.size());
    for (size_t k = 0; k < ref_streams.size(); ++k) refs[k] = &ref_streams[k][i];
    segments[i] = segment(i, refs);
  });
  return segments;
}

}  // namespace nmt::bleu_text
