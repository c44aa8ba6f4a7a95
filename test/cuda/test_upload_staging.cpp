// UploadStaging (kernels/cuda/upload_staging.h): parts of the pinned buffer reach their device
// destinations in stream order, a new round's begin() waits for the last round's copies before
// the host rewrites the memory, and a copy past the staging's end is refused.
#include <cuda_runtime.h>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "kernels/cuda/stream.h"
#include "kernels/cuda/upload_staging.h"
#include "test/cuda/gpu_test_util.h"
#include "test/support/catch.h"

namespace nmt::test {

TEST_CASE("upload staging copies its parts in order, round after round", "[cuda][upload]") {
  const int64_t n = 1000;  // two parts of 1000 i32 at byte offsets 0 and 4096
  GpuTensor dst = upload_i32(std::vector<int32_t>(2 * n, -1), {2 * n});
  cuda::UploadStaging staging(4096 + n * sizeof(int32_t));
  for (int32_t round = 0; round < 3; ++round) {
    INFO("round " << round);
    char* host = static_cast<char*>(staging.begin());
    std::vector<int32_t> first(n), second(n);
    for (int64_t i = 0; i < n; ++i) {
      first[i] = round * 10000 + static_cast<int32_t>(i);
      second[i] = -round * 10000 - static_cast<int32_t>(i);
    }
    std::memcpy(host, first.data(), n * sizeof(int32_t));
    std::memcpy(host + 4096, second.data(), n * sizeof(int32_t));
    auto* out = static_cast<int32_t*>(dst.view.data);
    staging.copy(0, out, n * sizeof(int32_t));
    staging.copy(4096, out + n, n * sizeof(int32_t));
    staging.copy(0, out, 0);  // nothing
    staging.end();
    REQUIRE(cudaStreamSynchronize(cuda::current_stream()) == cudaSuccess);
    std::vector<int32_t> expected = first;
    expected.insert(expected.end(), second.begin(), second.end());
    CHECK(download_i32(dst.view) == expected);
  }
}

TEST_CASE("upload staging refuses a copy past its end", "[cuda][upload]") {
  GpuTensor dst = upload_i32(std::vector<int32_t>(64, 0), {64});
  cuda::UploadStaging staging(128);
  (void)staging.begin();
  CHECK_THROWS_AS(staging.copy(100, dst.view.data, 32), std::out_of_range);
  CHECK_THROWS_AS(staging.copy(129, dst.view.data, 0), std::out_of_range);
  CHECK_NOTHROW(staging.copy(96, dst.view.data, 32));
  staging.end();
  REQUIRE(cudaStreamSynchronize(cuda::current_stream()) == cudaSuccess);
}

}  // namespace nmt::test
