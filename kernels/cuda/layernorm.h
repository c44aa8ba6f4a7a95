// The CUDA layer norm and its fused tails (kernels/layernorm.h dispatches here with the same
// signatures), enqueued on the current stream (kernels/cuda/stream.h) without synchronising.
// layernorm_forward.cu holds the forward ops, layernorm_backward.cu the backward ones.
// Dtype contract (docs/cuda.md): T is the call's activation dtype (f32, bf16 or f16, one per call);
// parameter gradients and saved statistics are f32; reductions accumulate in fp32 or wider.
// While a PartialSumDeferral is active on the calling thread (kernels/cuda/reduce.h), the backward
// ops' accumulated (+=) parameter and branch-bias gradients are added at its flush(), not by the
// time the op returns.
#pragma once

#include "kernels/philox.h"
#include "kernels/tensor.h"

namespace nmt::cuda {

// x, y: [rows, d] T; gamma, beta: [d] T; mean, rstd: [rows] f32.
void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                       Tensor& mean, Tensor& rstd, float eps);
// dy, x, dx: [rows, d] T (dx may alias dy); gamma: [d] T; mean, rstd: [rows] f32;
// d_gamma, d_beta: [d] f32, accumulated (+=) deterministically.
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& d_gamma, Tensor& d_beta);
// As layernorm_backward, with dx = residual + the input gradient, equal bit for bit to
// layernorm_backward then residual_add (kernels/layernorm.h). residual: [rows, d] T; dx may be
// the very same memory as residual, must not overlap dy.
void layernorm_backward_add(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                            const Tensor& mean, const Tensor& rstd, const Tensor& residual,
                            Tensor& dx, Tensor& d_gamma, Tensor& d_beta);

// dropout_residual_add(residual, branch, sum, p, key) then layernorm_forward(sum, gamma, beta, y,
// mean, rstd, eps) in one pass, equal to them bit for bit (kernels/layernorm.h). residual, branch,
// sum, y: [rows, d] T (sum may be the very same memory as residual or branch; y overlaps none of
// them); gamma, beta: [d] T; mean, rstd: [rows] f32. keep_bits: empty, or
// [dropout_keep_bits_words(rows, d)] i32 apart from residual, branch, sum and y; returns true when
// the mask was stored there (p > 0 on the register path in 8-element packs, bf16 / f16).
bool dropout_residual_layernorm_forward(const Tensor& residual, const Tensor& branch, Tensor& sum,
                                        float p, const RngKey& key, const Tensor& gamma,
                                        const Tensor& beta, Tensor& y, Tensor& mean, Tensor& rstd,
                                        float eps, const Tensor& keep_bits = Tensor());
// layernorm_backward(dy, x, gamma, mean, rstd, dx, d_gamma, d_beta) then dropout_backward_bias(dx,
// d_branch, p, key, d_branch_bias) in one pass (kernels/layernorm.h): dx, d_branch, d_gamma and
// d_beta equal the pair's bit for bit; d_branch_bias is summed in the order of the LayerNorm's
// parameter gradients, deterministic on one GPU. dy, x, dx, d_branch: [rows, d] T (dx may be
// the very same memory as dy; d_branch overlaps none of the others); gamma: [d] T; mean, rstd:
// [rows] f32; d_gamma, d_beta, d_branch_bias: [d] f32 (+=). keep_bits: empty (the mask is drawn)
// or the forward's saved mask of p and key, [dropout_keep_bits_words(rows, d)] i32 apart from dx
// and d_branch: read by the 16-bit packs' register path and dropout_backward_bias, the same bits.
void layernorm_backward_dropout_bias(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                     const Tensor& mean, const Tensor& rstd, Tensor& dx,
                                     Tensor& d_gamma, Tensor& d_beta, Tensor& d_branch, float p,
                                     const RngKey& key, Tensor& d_branch_bias,
                                     const Tensor& keep_bits = Tensor());

// layernorm_backward_add(dy, x, gamma, mean, rstd, residual, dx, d_gamma, d_beta) then
// dropout_backward_bias(dx, d_branch, p, key, d_branch_bias) in one pass (kernels/layernorm.h): dx,
// d_branch, d_gamma and d_beta equal the pair's bit for bit; d_branch_bias is summed in the order
// of the LayerNorm's parameter gradients, deterministic on one GPU. dy, x, residual, dx, d_branch:
// [rows, d] T (dx may be the very same memory as residual, overlaps neither dy nor x; d_branch
// overlaps none of the others); gamma: [d] T; mean, rstd: [rows] f32; d_gamma, d_beta,
// d_branch_bias: [d] f32 (+=). keep_bits: as layernorm_backward_dropout_bias's.
void layernorm_backward_add_dropout_bias(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                         const Tensor& mean, const Tensor& rstd,
                                         const Tensor& residual, Tensor& dx, Tensor& d_gamma,
                                         Tensor& d_beta, Tensor& d_branch, float p,
                                         const RngKey& key, Tensor& d_branch_bias,
                                         const Tensor& keep_bits = Tensor());

// The partial sums (floats) one LayerNorm backward op of these rows writes where a deferral
// (kernels/cuda/reduce.h PartialSumDeferral) takes them: the most any of the four ops' register
// path writes for a 16-byte aligned [rows, d] of dtype (0 where the generic path runs, which never
// defers). Needs the device (occupancy).
int64_t layernorm_backward_partial_floats(int64_t rows, int64_t d, DType dtype);

}  // namespace nmt::cuda
