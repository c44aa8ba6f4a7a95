// Comparisons shared by the data-parallel suites (CPU and GPU) run under mpiexec: are the ranks'
// final parameters bit-identical, and how far are they from a single-process run.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace nmt::test {

// Bit-identical on every rank: element-wise min and max over ranks agree exactly.
inline bool identical_on_every_rank(std::vector<float>& values) {
  auto n = static_cast<int>(values.size());
  std::vector<float> lo(values.size()), hi(values.size());
  MPI_Allreduce(values.data(), lo.data(), n, MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(values.data(), hi.data(), n, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  return std::equal(lo.begin(), lo.end(), hi.begin());
}

struct ScaledDifference {
  double max_difference = 0;
  double scale = 1e-12;  // the largest |reference| element (never 0)
  double relative() const { return max_difference / scale; }
};

// max |reference - other| against the largest |reference| (same sizes).
inline ScaledDifference scaled_difference(const std::vector<float>& reference,
                                          const std::vector<float>& other) {
  ScaledDifference d;
  for (size_t i = 0; i < reference.size(); ++i) {
    d.max_difference =
        std::max(d.max_difference, static_cast<double>(std::abs(reference[i] - other[i])));
    d.scale = std::max(d.scale, static_cast<double>(std::abs(reference[i])));
  }
  return d;
}

}  // namespace nmt::test
