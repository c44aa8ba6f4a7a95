// Checkpoints of GPU-resident parameters and Adam moments: the files are byte-identical to those of
// the same values on the CPU, and loading back to the GPU restores every bit.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/model/arena.h"
#include "engine/model/param_store.h"
#include "kernels/elementwise.h"
#include "test/checkpoint/python_oracle.h"
#include "test/support/catch.h"

using nmt::test::ScratchDir;

namespace {

// A small parameter store on `device` (with the shared-embedding name) and moment buffers.
struct Store {
  nmt::Arena arena;
  nmt::ParamStore params;
  nmt::Buffer m, v;

  Store(nmt::Device device, uint64_t seed) : arena(device, 1 << 20) {
    params.add("encoder.embed_tokens.weight", {11, 8}, nmt::ParamKind::embedding);
    params.add("encoder.layers.0.fc1.weight", {16, 8}, nmt::ParamKind::weight);
    params.add("encoder.layers.0.fc1.bias", {16}, nmt::ParamKind::bias);
    params.finalize(arena);
    params.initialize(seed);
    m = arena.allocate("m", nmt::DType::f32, params.total_elements());
    v = arena.allocate("v", nmt::DType::f32, params.total_elements());
    std::vector<float> host(static_cast<size_t>(params.total_elements()));
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(seed) + 0.001f * i;
    upload(host, m.flat());
    for (float& x : host) x *= 1e-3f;
    upload(host, v.flat());
  }
  static void upload(std::vector<float>& host, nmt::Tensor dst) {
    nmt::Tensor src(host.data(), nmt::DType::f32, nmt::Device::cpu, {dst.numel()});
    nmt::copy_tensor(src, dst);
  }
  static std::vector<float> download(const nmt::Tensor& t) {
    std::vector<float> host(static_cast<size_t>(t.numel()));
    nmt::Tensor dst(host.data(), nmt::DType::f32, nmt::Device::cpu, {t.numel()});
    nmt::copy_tensor(t, dst);
    return host;
  }
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("GPU checkpoints equal CPU checkpoints and load back bit for bit", "[checkpoint][cuda]") {
  ScratchDir dir("nmt-ckpt-cuda");
  nmt::RunConfig cfg;
  nmt::CheckpointState state;
  state.step = 1;
  Store gpu(nmt::Device::cuda, 3), cpu(nmt::Device::cpu, 3);
  std::string gpu_path = nmt::save_checkpoint(dir.path() + "/gpu", gpu.params, gpu.m.flat(),
                                              gpu.v.flat(), state, cfg, 0)
                             .path;
  std::string cpu_path = nmt::save_checkpoint(dir.path() + "/cpu", cpu.params, cpu.m.flat(),
                                              cpu.v.flat(), state, cfg, 0)
                             .path;
  for (const char* file : {"/model.safetensors", "/optimizer.safetensors"}) {
    INFO(file);
    CHECK(read_bytes(gpu_path + file) == read_bytes(cpu_path + file));
  }
  Store loaded(nmt::Device::cuda, 4);
  nmt::load_checkpoint(gpu_path, loaded.params, loaded.m.flat(), loaded.v.flat(), cfg);
  CHECK(same_bits(Store::download(loaded.params.master()), Store::download(gpu.params.master())));
  CHECK(same_bits(Store::download(loaded.m.flat()), Store::download(gpu.m.flat())));
  CHECK(same_bits(Store::download(loaded.v.flat()), Store::download(gpu.v.flat())));
}
