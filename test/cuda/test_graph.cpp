// CapturedGraph (kernels/cuda/graph.h) on an OwnedStream (kernels/cuda/stream.h): capturing runs
// nothing, each launch replays the captured ops on the inputs' current contents, a capture of
// something a graph cannot hold (a host read) or of work that throws fails loudly and leaves the
// stream usable, the legacy default stream is refused, and a moved-from graph is empty; a
// SegmentedCapture's graphs each hold only their own segment's ops.
#include <cuda_runtime.h>

#include <stdexcept>
#include <utility>
#include <vector>

#include "kernels/cuda/graph.h"
#include "kernels/cuda/stream.h"
#include "kernels/elementwise.h"
#include "test/cuda/gpu_test_util.h"
#include "test/support/catch.h"

namespace nmt::test {
namespace {

// y = 3 * x as three ops: y = x, y += x, y += x.
void triple(const Tensor& x, Tensor& y) {
  copy_tensor(x, y);
  add_inplace(y, x);
  add_inplace(y, x);
}

std::vector<float> tripled(std::vector<float> values) {
  for (float& v : values) v *= 3.0f;
  return values;
}

// Copies host values into a device tensor on the current stream, then waits for it.
void write(const std::vector<float>& values, Tensor& dst) {
  std::vector<float> copy = values;
  copy_tensor(cpu_view(copy, {static_cast<int64_t>(copy.size())}), dst);
  REQUIRE(cudaStreamSynchronize(cuda::current_stream()) == cudaSuccess);
}

}  // namespace

TEST_CASE("CapturedGraph: captured once, replayed on the inputs' current contents",
          "[cuda][graph]") {
  cuda::OwnedStream stream;
  cuda::StreamScope on_stream(stream.get());
  const int64_t n = 1000;
  GpuTensor x = upload(random_floats(n, 1), {n}, DType::f32);
  GpuTensor y = upload(std::vector<float>(n, 0.0f), {n}, DType::f32);
  cuda::CapturedGraph graph =
      cuda::CapturedGraph::capture(stream.get(), [&] { triple(x.view, y.view); });
  REQUIRE(!graph.empty());
  CHECK(graph.nodes() == 3);
  REQUIRE(cudaStreamSynchronize(stream.get()) == cudaSuccess);
  CHECK(download(y.view) == std::vector<float>(n, 0.0f));  // capturing ran nothing
  for (uint64_t seed : {2, 3, 4}) {
    const std::vector<float> values = random_floats(n, seed);
    write(values, x.view);
    graph.launch(stream.get());
    REQUIRE(cudaStreamSynchronize(stream.get()) == cudaSuccess);
    CHECK(download(y.view) == tripled(values));
  }
  cuda::CapturedGraph moved = std::move(graph);
  CHECK(graph.empty());  // the moved-from state is part of the contract
  CHECK(moved.nodes() == 3);
  CHECK_THROWS_AS(graph.launch(stream.get()), std::logic_error);
}

TEST_CASE("CapturedGraph: what a graph cannot hold fails the capture, the stream stays usable",
          "[cuda][graph]") {
  cuda::OwnedStream stream;
  cuda::StreamScope on_stream(stream.get());
  const int64_t n = 64;
  GpuTensor x = upload(random_floats(n, 5), {n}, DType::f32);
  GpuTensor y = upload(std::vector<float>(n, 0.0f), {n}, DType::f32);
  std::vector<float> host(n);
  Tensor host_view = cpu_view(host, {n});
  // A copy to the host synchronises the stream: illegal while capturing.
  CHECK_THROWS_AS(cuda::CapturedGraph::capture(stream.get(),
                                               [&] {
                                                 triple(x.view, y.view);
                                                 copy_tensor(y.view, host_view);
                                               }),
                  std::runtime_error);
  CHECK_THROWS_AS(cuda::CapturedGraph::capture(
                      stream.get(), [] { throw std::invalid_argument("the step's own error"); }),
                  std::invalid_argument);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  REQUIRE(cudaStreamIsCapturing(stream.get(), &status) == cudaSuccess);
  CHECK(status == cudaStreamCaptureStatusNone);
  triple(x.view, y.view);  // eagerly, on the same stream
  CHECK(download(y.view) == tripled(download(x.view)));
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("SegmentedCapture: consecutive graphs, each launched alone, the host acting between",
          "[cuda][graph]") {
  cuda::OwnedStream stream;
  cuda::StreamScope on_stream(stream.get());
  const int64_t n = 333;
  GpuTensor x = upload(random_floats(n, 6), {n}, DType::f32);
  GpuTensor y = upload(std::vector<float>(n, 0.0f), {n}, DType::f32);
  GpuTensor z = upload(std::vector<float>(n, 0.0f), {n}, DType::f32);
  std::vector<cuda::CapturedGraph> graphs;
  {
    cuda::SegmentedCapture capture(stream.get());
    CHECK(cuda::current_stream() == stream.get());
    triple(x.view, y.view);  // y = 3x
    graphs.push_back(capture.cut());
    graphs.push_back(capture.cut());  // nothing between two cuts: a graph of no nodes
    triple(y.view, z.view);           // z = 3y
    graphs.push_back(capture.finish());
    CHECK_THROWS_AS(capture.cut(), std::logic_error);
  }
  REQUIRE(graphs.size() == 3);
  CHECK(graphs[0].nodes() == 3);
  CHECK(graphs[1].nodes() == 0);
  CHECK(graphs[2].nodes() == 3);
  REQUIRE(cudaStreamSynchronize(stream.get()) == cudaSuccess);
  CHECK(download(y.view) == std::vector<float>(n, 0.0f));  // capturing ran nothing
  const std::vector<float> values = random_floats(n, 7);
  write(values, x.view);
  graphs[0].launch(stream.get());
  graphs[1].launch(stream.get());  // enqueues nothing
  REQUIRE(cudaStreamSynchronize(stream.get()) == cudaSuccess);
  CHECK(download(y.view) == tripled(values));
  CHECK(download(z.view) == std::vector<float>(n, 0.0f));  // the second graph has not run
  write(std::vector<float>(n, 1.0f), y.view);              // the host between the segments
  graphs[2].launch(stream.get());
  REQUIRE(cudaStreamSynchronize(stream.get()) == cudaSuccess);
  CHECK(download(z.view) == std::vector<float>(n, 3.0f));

  // Work that throws between cuts abandons the capture; the stream stays usable.
  CHECK_THROWS_AS(
      [&] {
        cuda::SegmentedCapture capture(stream.get());
        triple(x.view, y.view);
        graphs.push_back(capture.cut());
        throw std::invalid_argument("the step's own error");
      }(),
      std::invalid_argument);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  REQUIRE(cudaStreamIsCapturing(stream.get(), &status) == cudaSuccess);
  CHECK(status == cudaStreamCaptureStatusNone);
  triple(x.view, y.view);
  CHECK(download(y.view) == tripled(download(x.view)));
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("CapturedGraph: the legacy default stream cannot be captured", "[cuda][graph]") {
  CHECK_THROWS_AS(cuda::CapturedGraph::capture(nullptr, [] {}), std::invalid_argument);
}

}  // namespace nmt::test
