// Optimizer: segments of the flat buffers, gradient norm, clipping, Adam/LazyAdam.
#include "engine/train/optimizer.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "kernels/elementwise.h"
#include "kernels/optimizer.h"

namespace nmt {

static Tensor slice(const Tensor& flat, int64_t offset, int64_t rows, int64_t cols) {
  Tensor t = flat;
  t.data = static_cast<char*>(flat.data) + offset * static_cast<int64_t>(dtype_size(flat.dtype));
  t.rank = 2;
  t.shape = {rows, cols, 0, 0};
  return t;
}

Optimizer::Optimizer(ParamStore& params, const OptimizerConfig& cfg, Device device)
    : params_(params),
      cfg_(cfg),
      arena_(device, 2 * (params.total_elements() * 4 + 256)),
      staged_arena_(Arena::planner(device)) {
  m_ = arena_.allocate("adam.m", DType::f32, params.total_elements());
  v_ = arena_.allocate("adam.v", DType::f32, params.total_elements());
  std::vector<const Param*> by_offset;
  for (const Param& p : params.params()) by_offset.push_back(&p);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const Param* a, const Param* b) { return a->offset < b->offset; });
  for (const Param* p : by_offset) {
    bool lazy = cfg.name == OptimizerKind::lazyadam && p->kind == ParamKind::embedding;
    if (!lazy && !segments_.empty() && !segments_.back().lazy) {
      segments_.back().numel += p->numel;
      segments_.back().cols += p->numel;
      continue;
    }
    int64_t cols = lazy ? p->shape.back() : p->numel;
    segments_.push_back(Segment{p->offset, p->numel, lazy ? p->numel / cols : 1, cols, lazy});
  }
}

AdamHyper Optimizer::hyper(int64_t step, double lr) const {
  AdamHyper h;
  h.lr = static_cast<float>(lr);
  h.beta1 = static_cast<float>(cfg_.beta1);
  h.beta2 = static_cast<float>(cfg_.beta2);
  h.eps = static_cast<float>(cfg_.epsilon);
  h.weight_decay = static_cast<float>(cfg_.weight_decay);
  h.step = step;
  return h;
}

OptimizerStepStats Optimizer::step(int64_t step, double lr, double tokens, double clip_norm) {
  OptimizerStepStats stats;
  double divisor = std::max(tokens, 1.0);
  stats.grad_norm = std::sqrt(sum_of_squares(params_.grads())) / divisor;
  if (!std::isfinite(stats.grad_norm)) {
    stats.skipped = true;
    return stats;
  }
  float scale =
      static_cast<float>(clip_factor(stats.grad_norm, static_cast<float>(clip_norm)) / divisor);
  const AdamHyper h = hyper(step, lr);
  Tensor master = params_.master(), grads = params_.grads(), m = m_.flat(), v = v_.flat();
  Tensor working = params_.working_copy();  // written by the same launches (mixed precision)
  for (const Segment& s : segments_) {
    Tensor p = slice(master, s.offset, s.rows, s.cols), g = slice(grads, s.offset, s.rows, s.cols);
    Tensor ms = slice(m, s.offset, s.rows, s.cols), vs = slice(v, s.offset, s.rows, s.cols);
    Tensor w = working.empty() ? Tensor() : slice(working, s.offset, s.rows, s.cols);
    Tensor* compute = working.empty() ? nullptr : &w;
    if (s.lazy)
      lazy_adam_update(p, g, ms, vs, h, scale, compute);
    else
      adam_update(p, g, ms, vs, h, scale, compute);
  }
  return stats;
}

void Optimizer::plan_stages(const std::vector<std::vector<const Param*>>& stages) {
  const Device device = params_.master().device;
  stage_ranges_.assign(stages.size(), {});
  int64_t parts = 0;
  // Each stage's parameters by offset; a run of adjacent dense ones is one range, each LazyAdam
  // table one of its own (as the segments of step()).
  for (size_t i = 0; i < stages.size(); ++i) {
    std::vector<const Param*> by_offset = stages[i];
    std::sort(by_offset.begin(), by_offset.end(),
              [](const Param* a, const Param* b) { return a->offset < b->offset; });
    std::vector<StagedRange>& ranges = stage_ranges_[i];
    for (const Param* p : by_offset) {
      const bool lazy = cfg_.name == OptimizerKind::lazyadam && p->kind == ParamKind::embedding;
      if (!lazy && !ranges.empty() && !ranges.back().lazy &&
          ranges.back().offset + ranges.back().numel == p->offset) {
        ranges.back().numel += p->numel;
        ranges.back().cols += p->numel;
        continue;
      }
      const int64_t cols = lazy ? p->shape.back() : p->numel;
      ranges.push_back(
          StagedRange{p->offset, p->numel, lazy ? p->numel / cols : 1, cols, lazy, 0, 0});
    }
    for (StagedRange& r : ranges) {
      r.parts_offset = parts;
      r.parts = gradient_check_parts(r.numel, device);
      parts += r.parts;
    }
  }
  staged_arena_ = Arena(device, 2 * 256 + static_cast<size_t>(kAdamGateWords + parts) * 4);
  gate_ = staged_arena_.allocate("optimizer.gate", DType::f32, kAdamGateWords);
  partials_ =
      staged_arena_.allocate("optimizer.stage_partials", DType::f32, std::max<int64_t>(parts, 1));
}

void Optimizer::begin_staged_step(int64_t step, double lr, double tokens) {
  const float scale = static_cast<float>(1.0 / std::max(tokens, 1.0));
  std::array<float, kAdamGateWords> words = adam_gate_words(hyper(step, lr), scale);
  Tensor host(words.data(), DType::f32, Device::cpu, {kAdamGateWords});
  Tensor gate = gate_.flat();
  copy_tensor(host, gate);
}

void Optimizer::update_stage(size_t stage) {
  const AdamHyper h = hyper(1, 0.0);  // beta1, beta2 and eps; the step's values are the gate's
  Tensor master = params_.master(), grads = params_.grads(), m = m_.flat(), v = v_.flat();
  Tensor working = params_.working_copy();
  Tensor gate = gate_.flat(), partials = partials_.flat();
  for (const StagedRange& r : stage_ranges_.at(stage)) {
    Tensor g = slice(grads, r.offset, r.rows, r.cols);
    Tensor sums = slice(partials, r.parts_offset, 1, r.parts).reshaped({r.parts});
    check_gradient_stage(g, sums, gate);
    Tensor p = slice(master, r.offset, r.rows, r.cols);
    Tensor ms = slice(m, r.offset, r.rows, r.cols), vs = slice(v, r.offset, r.rows, r.cols);
    Tensor w = working.empty() ? Tensor() : slice(working, r.offset, r.rows, r.cols);
    Tensor* compute = working.empty() ? nullptr : &w;
    if (r.lazy)
      lazy_adam_update_gated(p, g, ms, vs, h, gate, compute);
    else
      adam_update_gated(p, g, ms, vs, h, gate, compute);
  }
}

OptimizerStepStats Optimizer::finish_staged_step(double tokens) {
  std::vector<float> words(kAdamGateWords), sums(static_cast<size_t>(partials_.capacity));
  Tensor host_words(words.data(), DType::f32, Device::cpu, {kAdamGateWords});
  Tensor host_sums(sums.data(), DType::f32, Device::cpu, {partials_.capacity});
  copy_tensor(gate_.flat(), host_words);
  copy_tensor(partials_.flat(), host_sums);
  double total = 0;
  for (float s : sums) total += s;
  OptimizerStepStats stats;
  stats.grad_norm = std::sqrt(total) / std::max(tokens, 1.0);
  stats.skipped = words[kAdamGateSkip] != 0.0f;
  return stats;
}

}  // namespace nmt
