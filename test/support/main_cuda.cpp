// Test main for CUDA suites: exits 77 (ctest "Skipped") with a clear message when no GPU is present.
#include <cstdio>

#include <cuda_runtime.h>

#include "test/support/catch_session.h"

int main(int argc, char** argv) {
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf("SKIPPED: no CUDA device available (%s); run `ctest -L cuda` on a GPU machine.\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
