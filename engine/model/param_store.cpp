// ParamStore layout and deterministic initialisation.
#include "engine/model/param_store.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>
#include <string_view>
#include <utility>

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

const ParamGroup* ParamStore::join(const std::vector<Param*>& members) {
  if (members.empty()) throw std::logic_error("parameter group without members");
  for (Param* p : members) {
    if (p->kind != members[0]->kind || p->shape != members[0]->shape)
      throw std::logic_error("parameter group of mixed kinds or shapes: " + members[0]->name +
                             ", " + p->name);
    for (const ParamGroup& g : groups_)
      if (std::find(g.members.begin(), g.members.end(), p) != g.members.end())
        throw std::logic_error("parameter in two groups: " + p->name);
  }
  ParamGroup g;
  g.members = members;
  g.shape = members[0]->shape;
  g.shape[0] *= static_cast<int64_t>(members.size());
  groups_.push_back(std::move(g));
  return &groups_.back();
}

const ParamGroup* ParamStore::join_groups(const std::vector<const ParamGroup*>& parts,
                                          const Param* before) {
  if (parts.empty()) throw std::logic_error("joined parameter group without parts");
  auto joined_member = [&](const Param* p) {
    for (const JoinedGroups& j : joined_)
      if (std::find(j.group.members.begin(), j.group.members.end(), p) != j.group.members.end())
        return true;
    return false;
  };
  ParamGroup g;
  g.shape = parts[0]->shape;
  g.shape[0] = 0;
  for (const ParamGroup* part : parts) {
    const bool made_by_join = std::any_of(groups_.begin(), groups_.end(),
                                          [&](const ParamGroup& own) { return &own == part; });
    if (!made_by_join) throw std::logic_error("joined parameter group: a part not made by join()");
    const Param* first = part->members[0];
    const Param* model = parts[0]->members[0];
    if (first->kind != model->kind || first->shape != model->shape)
      throw std::logic_error("joined parameter group of mixed kinds or shapes: " + model->name +
                             ", " + first->name);
    for (Param* p : part->members) {
      if (joined_member(p) || std::find(g.members.begin(), g.members.end(), p) != g.members.end())
        throw std::logic_error("parameter in two joined groups: " + p->name);
      g.members.push_back(p);
    }
    g.shape[0] += part->shape[0];
  }
  const bool own =
      std::any_of(params_.begin(), params_.end(), [&](const Param& p) { return &p == before; });
  if (!own || joined_member(before) ||
      std::find(g.members.begin(), g.members.end(), before) != g.members.end())
    throw std::logic_error(
        "joined parameter group: `before` must be a parameter in no joined group");
  joined_.push_back(JoinedGroups{std::move(g), before});
  return &joined_.back().group;
}

static Tensor view_at(const Buffer& b, int64_t offset, const std::vector<int64_t>& shape) {
  Tensor t = b.flat();
  t.data = b.data ? static_cast<char*>(b.data) + offset * static_cast<int64_t>(dtype_size(b.dtype))
                  : nullptr;
  t.rank = static_cast<int>(shape.size());
  for (int i = 0; i < t.rank; ++i) t.shape[i] = shape[i];
  return t;
}

static Tensor view_of(const Buffer& b, const Param& p) {
  return view_at(b, p.offset, p.shape);
}

void ParamStore::finalize(Arena& arena, DType compute_dtype) {
  compute_dtype_ = compute_dtype;
  total_ = 0;
  // Reverse registration order; a group's members go together where the first of them comes, a
  // joined group's directly in front of the parameter (or group) it names.
  std::map<const Param*, const ParamGroup*> group_of;
  for (const ParamGroup& g : groups_)
    for (const Param* p : g.members) group_of[p] = &g;
  std::set<const Param*> joined, placed;
  for (const JoinedGroups& j : joined_)
    joined.insert(j.group.members.begin(), j.group.members.end());
  auto place = [&](const std::vector<Param*>& members) {
    for (Param* p : members) {
      p->offset = total_;
      total_ += p->numel;
      placed.insert(p);
    }
  };
  for (auto it = params_.rbegin(); it != params_.rend(); ++it) {
    if (placed.count(&*it) || joined.count(&*it)) continue;
    auto g = group_of.find(&*it);
    const std::vector<Param*> unit =
        g == group_of.end() ? std::vector<Param*>{&*it} : g->second->members;
    for (const JoinedGroups& j : joined_)
      if (std::find(unit.begin(), unit.end(), j.before) != unit.end()) place(j.group.members);
    place(unit);
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
  auto set_views = [&](ParamGroup& g) {
    const int64_t offset = g.members[0]->offset;
    g.compute = compute_dtype == DType::f32 ? view_at(master_, offset, g.shape)
                                            : view_at(compute_, offset, g.shape);
    g.grad = view_at(grads_, offset, g.shape);
  };
  for (ParamGroup& g : groups_) set_views(g);
  for (JoinedGroups& j : joined_) set_views(j.group);
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

namespace {

// The layers of each stack, from the names `encoder.layers.N.` / `decoder.layers.N.`.
InitDepth depth_of(const std::deque<Param>& params) {
  InitDepth depth{0, 0};
  for (const Param& p : params) {
    for (const auto& [stack, count] : {std::pair{"encoder.layers.", &depth.encoder_layers},
                                       std::pair{"decoder.layers.", &depth.decoder_layers}}) {
      if (p.name.rfind(stack, 0) != 0) continue;
      const int64_t layer = std::stoll(p.name.substr(std::string_view(stack).size()));
      *count = std::max(*count, layer + 1);
    }
  }
  return depth;
}

// `encoder.layers.3.fc1.weight` -> `encoder.layers.0.fc1.weight`; other names unchanged.
std::string layer_zero_twin(const std::string& name) {
  for (std::string_view stack : {"encoder.layers.", "decoder.layers."}) {
    if (name.rfind(stack, 0) != 0) continue;
    const size_t dot = name.find('.', stack.size());
    return std::string(stack) + "0" + name.substr(dot);
  }
  return name;
}

// [fan_out, fan_in] of a projection weight; a bias takes its weight's (the name with `.weight`).
std::pair<double, double> fans_of(const ParamStore& store, const Param& p) {
  const Param* weight = &p;
  if (p.kind == ParamKind::bias) {
    weight = store.find(p.name.substr(0, p.name.size() - 5) + ".weight");
    if (!weight) throw std::logic_error("bias without a weight: " + p.name);
  }
  const double fan_out = static_cast<double>(weight->shape[0]);
  return {static_cast<double>(weight->numel) / fan_out, fan_out};
}

// The draws below are rng_uniform's (kernels/philox.h), taken a Philox block (four uniforms) at a
// time instead of one call per uniform, which computed each block four times, and spread over the
// OpenMP threads: each element's value depends on its index alone, so the values are the same bits
// for any thread count. A Transformer-base store (48M values) took most of nmt-train's start-up
// this way before (session 17).
constexpr int64_t kParallelBlocks = 4096;  // fewer Philox blocks than this: one thread

// out[i] = (2 u(i) - 1) * bound, u(i) = rng_uniform(key, i).
void fill_uniform(const RngKey& key, double bound, int64_t n, float* out) {
  const float b = static_cast<float>(bound);
  const int64_t blocks = (n + 3) / 4;
#pragma omp parallel for schedule(static) if (blocks > kParallelBlocks)
  for (int64_t block = 0; block < blocks; ++block) {
    float u[4];
    rng_block_uniforms(key, static_cast<uint64_t>(block), u);
    for (int64_t j = 0; j < 4 && 4 * block + j < n; ++j)
      out[4 * block + j] = (2.0f * u[j] - 1.0f) * b;
  }
}

// Box-Muller on two uniforms from disjoint halves of the stream: out[i] from u(2i) and u(2i + 1),
// so block b gives elements 2b and 2b + 1.
void fill_normal(const RngKey& key, double stddev, int64_t n, float* out) {
  const int64_t blocks = (n + 1) / 2;
#pragma omp parallel for schedule(static) if (blocks > kParallelBlocks)
  for (int64_t block = 0; block < blocks; ++block) {
    float u[4];
    rng_block_uniforms(key, static_cast<uint64_t>(block), u);
    for (int64_t j = 0; j < 2 && 2 * block + j < n; ++j) {
      const double u1 = 1.0 - u[2 * j], u2 = u[2 * j + 1];
      out[2 * block + j] = static_cast<float>(stddev * std::sqrt(-2.0 * std::log(u1)) *
                                              std::cos(6.283185307179586 * u2));
    }
  }
}

}  // namespace

void ParamStore::initialize(uint64_t seed, InitScheme scheme) {
  std::vector<float> host(static_cast<size_t>(total_));
  const InitDepth depth = depth_of(params_);
  int64_t d_model = 0;
  for (const Param& p : params_)
    if (p.kind == ParamKind::embedding) d_model = p.shape.back();
  // One random stream per parameter, disjoint from dropout's tensor ids; with torch_copies a
  // parameter of layer N > 0 reads the stream of its layer-0 twin, so each stack's layers start
  // as copies of its first, as PyTorch's deep-copied layers do.
  std::map<std::string, uint32_t> stream_of;
  uint32_t next_stream = 0x70000000u;
  for (const Param& p : params_) stream_of[p.name] = next_stream++;
  for (const Param& p : params_) {
    uint32_t stream = stream_of[p.name];
    if (scheme == InitScheme::torch_copies) stream = stream_of.at(layer_zero_twin(p.name));
    RngKey key{seed, 0, stream};
    float* out = host.data() + p.offset;
    switch (p.kind) {
      case ParamKind::weight:
      case ParamKind::bias: {
        const auto [fan_in, fan_out] = fans_of(*this, p);
        const InitDraw draw =
            init_draw(scheme, param_role_of(p.name), fan_in, fan_out, d_model, depth);
        if (draw.kind == InitDraw::Kind::uniform)
          fill_uniform(key, draw.bound, p.numel, out);
        else if (draw.kind == InitDraw::Kind::normal)
          fill_normal(key, draw.stddev, p.numel, out);
        else
          std::fill(out, out + p.numel, static_cast<float>(draw.value));
        break;
      }
      case ParamKind::embedding:
        fill_normal(key, 1.0 / std::sqrt(static_cast<double>(p.shape.back())), p.numel, out);
        break;
      case ParamKind::norm_gain:
        std::fill(out, out + p.numel, 1.0f);
        break;
      case ParamKind::norm_bias:
        std::fill(out, out + p.numel, 0.0f);
        break;
    }
  }
  Tensor src(host.data(), DType::f32, Device::cpu, {total_});
  Tensor dst = master();
  copy_tensor(src, dst);
  sync_compute();
}

}  // namespace nmt
