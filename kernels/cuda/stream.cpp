// The thread-local current CUDA stream.
#include "kernels/cuda/stream.h"

namespace nmt::cuda {
namespace {

thread_local cudaStream_t g_current_stream = nullptr;

}  // namespace

cudaStream_t current_stream() {
  return g_current_stream;
}

void set_current_stream(cudaStream_t stream) {
  g_current_stream = stream;
}

}  // namespace nmt::cuda
