// Params: the one plain parameter struct every fused attention kernel reads (flash-attention's
// Flash_fwd_params / Flash_bwd_params in one), filled on the host by make_params (launch.cuh) from
// the operands the dispatch in kernels/fused_attention.cpp has checked.
#pragma once

#include <cstdint>

#include "kernels/philox.h"

namespace nmt::cuda::flash {

// Launch parameters of every fused attention kernel. Tensor pointers point at the first head's
// column of row 0; strides are in elements between consecutive rows.
struct Params {
  const void* q;
  const void* k;
  const void* v;
  int64_t q_stride, k_stride, v_stride;
  const int32_t* kv_lengths;  // [batch]
  void* out;                  // [batch * q_len, out_stride]: written by forward, read by backward
  int64_t out_stride;
  float* lse;  // [batch, heads, q_len]
  const void* d_out;
  int64_t d_out_stride;
  float* delta;  // [batch, heads, q_len]: rowsum(d_out * out), backward scratch
  void* dq;
  void* dk;
  void* dv;
  int64_t dq_stride, dk_stride, dv_stride;
  int batch, heads, q_len, kv_len;
  // Sentences per item of the short-sentence wgmma kernels (short_pack.cuh): 1, or several short
  // sentences side by side in one 64-row tile. Every other kernel takes 1.
  int pack;
  bool causal;
  bool vector_io;  // every pointer and stride allows 16-byte accesses
  float dropout_p, keep_scale;
  float scale, scale_log2;  // 1/sqrt(dh), and times log2(e) for exp2
  RngKey key;
  // [batch, heads, q_len, 2] words of dropout keep bits, or nullptr: the short-sentence wgmma
  // forward stores them, its backward reads them instead of drawing them (short_wgmma.cu).
  uint32_t* keep_bits;
  // [batch, 3, heads * 64] f32 or nullptr: the short-sentence wgmma backward's column sums of each
  // (sentence, head) item's dQ, dK, dV head columns, for the bias gradients (short_wgmma.cu).
  float* bias_partials;
};

}  // namespace nmt::cuda::flash
