// Layer normalisation over the last dimension: y = (x - mean) * rstd * gamma + beta, and the
// sublayer tails fused into it.
#pragma once

#include "kernels/philox.h"
#include "kernels/tensor.h"

namespace nmt {

// x, y: [rows, d]; gamma, beta: [d]; mean, rstd: [rows] f32 (saved for backward).
void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                       Tensor& mean, Tensor& rstd, float eps);

// dy, x, dx: [rows, d]; dx is written (=), may alias dy; d_gamma, d_beta: [d], accumulated (+=).
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& d_gamma, Tensor& d_beta);

// The pre-norm residual's backward in one pass: dx = residual + (the input gradient of
// layernorm_backward), equal bit for bit to layernorm_backward into a scratch tensor followed by
// residual_add(residual, scratch, dx) on both backends (the input gradient is rounded to the
// activation dtype where layernorm_backward stores it, then added in f32 and rounded as
// residual_add adds). d_gamma, d_beta: [d], accumulated (+=) as by layernorm_backward.
// dy, x, residual, dx: [rows, d], one dtype; dx is written (=). dx may be the very same memory
// as residual (each element is read before the same element is written), but must not overlap
// dy (no caller needs that, and leaving it out lets a kernel read dy after writing dx); both are
// checked (std::invalid_argument).
void layernorm_backward_add(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                            const Tensor& mean, const Tensor& rstd, const Tensor& residual,
                            Tensor& dx, Tensor& d_gamma, Tensor& d_beta);

// The post-norm sublayer's forward tail, out = LN(x + dropout(f(x))), in one pass:
// dropout_residual_add(residual, branch, sum, p, key) then layernorm_forward(sum, gamma, beta, y,
// mean, rstd, eps), equal to the two ops bit for bit on both backends (the mask of the same flat
// element index; sum rounded to the activation dtype as dropout_residual_add stores it, and
// normalised as layernorm_forward normalises the stored sum). sum, the LayerNorm input, is written
// for the backward.
// residual, branch, sum, y: [rows, d], one dtype; gamma, beta: [d]; mean, rstd: [rows] f32
// (written). sum may be the very same memory as residual or branch (each element is read before it
// is written); y must not overlap residual, branch or sum (checked, std::invalid_argument).
// keep_bits: empty, or [dropout_keep_bits_words(rows, d)] i32 (kernels/philox.h) on the tensors'
// device, apart from residual, branch, sum and y (checked): where the op can, it stores the
// dropout's keep mask
// there, so that the backward tails below read it instead of drawing it again (the draws were
// half of their instructions). Returns true when it stored the mask (every byte of the rows * d /
// 8; a last word's bytes past them are left alone): on the GPU with p > 0, a 16-bit dtype, d a
// multiple of 8 up to 1024 and every [rows, d] and [d] tensor 16-byte aligned (the register path
// in 8-element packs, docs/cuda.md). Elsewhere (f32, other widths or alignments, p == 0, the CPU)
// it returns false and leaves keep_bits alone; the other results are the same bits either way.
bool dropout_residual_layernorm_forward(const Tensor& residual, const Tensor& branch, Tensor& sum,
                                        float p, const RngKey& key, const Tensor& gamma,
                                        const Tensor& beta, Tensor& y, Tensor& mean, Tensor& rstd,
                                        float eps, const Tensor& keep_bits = Tensor());

// The post-norm sublayer's backward tail in one pass: layernorm_backward(dy, x, gamma, mean, rstd,
// dx, d_gamma, d_beta) then dropout_backward_bias(dx, d_branch, p, key, d_branch_bias). dx (the
// LayerNorm's input gradient: the residual's gradient, written =) and d_branch (its dropout
// backward: the gradient of the branch f(x), written =) are the pair's bit for bit, d_branch
// computed from dx as rounded to the activation dtype; d_gamma, d_beta and d_branch_bias
// (the gradient of f's output bias: d_branch's column sums) are accumulated (+=). On the CPU every
// result is the pair's bit for bit; on the GPU d_gamma and d_beta are too, and d_branch_bias is
// summed in the fixed order of the LayerNorm's parameter gradients rather than of the column sums
// (docs/cuda.md), deterministic run to run on one GPU.
// dy, x, dx, d_branch: [rows, d], one dtype; gamma: [d]; mean, rstd: [rows] f32; d_gamma,
// d_beta, d_branch_bias: [d] f32. dx may be the very same memory as dy, and must not overlap x;
// d_branch must not overlap dy, x or dx; d_branch_bias must not overlap dy, dx or d_branch (all
// checked, std::invalid_argument).
// keep_bits: empty (the mask of p and key is drawn), or the mask of p and key over these [rows, d]
// as dropout_residual_layernorm_forward stored it (returned true), [dropout_keep_bits_words(rows,
// d)] i32 on the tensors' device, apart from dx and d_branch (checked). Every result is the same
// bits either way. The GPU reads it where the forward stores it (16-bit packs on the register
// path) and in dropout_backward_bias where it runs that; the CPU draws the mask.
void layernorm_backward_dropout_bias(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                     const Tensor& mean, const Tensor& rstd, Tensor& dx,
                                     Tensor& d_gamma, Tensor& d_beta, Tensor& d_branch, float p,
                                     const RngKey& key, Tensor& d_branch_bias,
                                     const Tensor& keep_bits = Tensor());

// The pre-norm sublayer's backward boundary in one pass: layernorm_backward_add(dy, x, gamma, mean,
// rstd, residual, dx, d_gamma, d_beta) then dropout_backward_bias(dx, d_branch, p, key,
// d_branch_bias). dx (residual + the LayerNorm's input gradient: the gradient of the sublayer's
// input, written =) and d_branch (its dropout backward: the gradient of the branch f(x), written =)
// are the pair's bit for bit, d_branch computed from dx as rounded to the activation dtype (a copy
// of dx when p is 0); d_gamma, d_beta and d_branch_bias (d_branch's column sums) are accumulated
// (+=). On the CPU every result is the pair's bit for bit; on the GPU d_gamma and d_beta are too,
// and d_branch_bias is summed in the fixed order of the LayerNorm's parameter gradients, as by
// layernorm_backward_dropout_bias (docs/cuda.md), deterministic run to run on one GPU.
// dy, x, residual, dx, d_branch: [rows, d], one dtype; gamma: [d]; mean, rstd: [rows] f32;
// d_gamma, d_beta, d_branch_bias: [d] f32. dx may be the very same memory as residual (each element
// is read before it is written; the model calls it so), and must not overlap dy or x; d_branch must
// not overlap dy, x, dx or residual; d_branch_bias must not overlap dy, dx or d_branch (all
// checked, std::invalid_argument). keep_bits: as layernorm_backward_dropout_bias's (in pre-norm the
// mask of the sublayer below, which its forward's dropout_residual_layernorm_forward stored).
void layernorm_backward_add_dropout_bias(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                         const Tensor& mean, const Tensor& rstd,
                                         const Tensor& residual, Tensor& dx, Tensor& d_gamma,
                                         Tensor& d_beta, Tensor& d_branch, float p,
                                         const RngKey& key, Tensor& d_branch_bias,
                                         const Tensor& keep_bits = Tensor());

}  // namespace nmt
