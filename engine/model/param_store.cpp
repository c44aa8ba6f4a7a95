// ParamStore layout and deterministic initialisation.
#include "engine/model/param_store.h"

#include <cmath>
#include <stdexcept>

#include "kernels/elementwise.h"
#include "kernels/philox.h"

namespace nmt {

Param* ParamStore::add(const std::string& name, std::vector<int64_t> shape, ParamKind kind) {
  if (find(name)) throw std::logic_error("parameter registered twice: " + name);
  Param p;
  p.name = name;
  p.shape = std::move(shape);
  p.kind = kind;
  p.numel = 1;
  for (int64_t d : p.shape) p.numel *= d;
  params_.push_back(std::move(p));
  return &params_.back();
}

static Tensor view_of(const Buffer& b, const Param& p) {
  Tensor t = b.flat();
  t.data = b.data
               ? static_cast<char*>(b.data) + p.offset * static_cast<int64_t>(dtype_size(b.dtype))
               : nullptr;
  t.rank = static_cast<int>(p.shape.size());
  for (int i = 0; i < t.rank; ++i) t.shape[i] = p.shape[i];
  return t;
}

void ParamStore::finalize(Arena& arena, DType compute_dtype) {
  compute_dtype_ = compute_dtype;
  total_ = 0;
  for (auto it = params_.rbegin(); it != params_.rend(); ++it) {
    it->offset = total_;
    total_ += it->numel;
  }
  master_ = arena.allocate("params.master", DType::f32, total_);
  grads_ = arena.allocate("params.grad", DType::f32, total_);
  if (compute_dtype != DType::f32)
    compute_ = arena.allocate("params.compute", compute_dtype, total_);
  for (Param& p : params_) {
    p.value = view_of(master_, p);
    p.compute = compute_dtype == DType::f32 ? p.value : view_of(compute_, p);
    p.grad = view_of(grads_, p);
  }
}

void ParamStore::sync_compute() {
  if (compute_dtype_ == DType::f32) return;
  Tensor dst = compute_.flat();
  convert_tensor(master(), dst);
}

const Param* ParamStore::find(const std::string& name) const {
  for (const Param& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

void ParamStore::initialize(uint64_t seed) {
  std::vector<float> host(static_cast<size_t>(total_));
  uint32_t tensor_id = 0x70000000u;  // init streams are disjoint from dropout's tensor ids
  for (const Param& p : params_) {
    RngKey key{seed, 0, tensor_id++};
    float* out = host.data() + p.offset;
    switch (p.kind) {
      case ParamKind::weight: {
        double fan_out = static_cast<double>(p.shape[0]);
        double fan_in = static_cast<double>(p.numel) / fan_out;
        float bound = static_cast<float>(std::sqrt(6.0 / (fan_in + fan_out)));
        for (int64_t i = 0; i < p.numel; ++i) out[i] = (2.0f * rng_uniform(key, i) - 1.0f) * bound;
        break;
      }
      case ParamKind::embedding: {
        double stddev = 1.0 / std::sqrt(static_cast<double>(p.shape.back()));
        for (int64_t i = 0; i < p.numel; ++i) {
          // Box-Muller on two uniforms from disjoint halves of the stream.
          double u1 = 1.0 - rng_uniform(key, 2 * i), u2 = rng_uniform(key, 2 * i + 1);
          out[i] = static_cast<float>(stddev * std::sqrt(-2.0 * std::log(u1)) *
                                      std::cos(6.283185307179586 * u2));
        }
        break;
      }
      case ParamKind::norm_gain:
        for (int64_t i = 0; i < p.numel; ++i) out[i] = 1.0f;
        break;
      case ParamKind::bias:
      case ParamKind::norm_bias:
        for (int64_t i = 0; i < p.numel; ++i) out[i] = 0.0f;
        break;
    }
  }
  Tensor src(host.data(), DType::f32, Device::cpu, {total_});
  Tensor dst = master();
  copy_tensor(src, dst);
  sync_compute();
}

}  // namespace nmt
