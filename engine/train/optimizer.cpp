// Optimizer: segments of the flat buffers, gradient norm, clipping, Adam/LazyAdam.
#include "engine/train/optimizer.h"

#include <algorithm>

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
      arena_(device, 2 * (params.total_elements() * 4 + 256) + kGradClipWords * 4 + 256) {
  m_ = arena_.allocate("adam.m", DType::f32, params.total_elements());
  v_ = arena_.allocate("adam.v", DType::f32, params.total_elements());
  clip_ = arena_.allocate("optimizer.clip", DType::i32, kGradClipWords);
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

OptimizerStepStats Optimizer::step(int64_t step, double lr, double tokens, double clip_norm) {
  enqueue_step(step, lr, tokens, clip_norm);
  return finish_step();
}

void Optimizer::enqueue_step(int64_t step, double lr, double tokens, double clip_norm) {
  Tensor clip = clip_.view({kGradClipWords});
  grad_clip_into(params_.grads(), std::max(tokens, 1.0), static_cast<float>(clip_norm), clip);
  AdamHyper h;
  h.lr = static_cast<float>(lr);
  h.beta1 = static_cast<float>(cfg_.beta1);
  h.beta2 = static_cast<float>(cfg_.beta2);
  h.eps = static_cast<float>(cfg_.epsilon);
  h.weight_decay = static_cast<float>(cfg_.weight_decay);
  h.step = step;
  Tensor master = params_.master(), grads = params_.grads(), m = m_.flat(), v = v_.flat();
  Tensor working = params_.working_copy();  // written by the same launches (mixed precision)
  const GradScale scale(clip);
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
}

OptimizerStepStats Optimizer::finish_step() const {
  const GradClip record = read_grad_clip(clip_.view({kGradClipWords}));
  OptimizerStepStats stats;
  stats.grad_norm = record.grad_norm;
  stats.skipped = record.skip != 0;
  return stats;
}

}  // namespace nmt
