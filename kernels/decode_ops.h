// Ops of incremental decoding (engine/decode/incremental_decoder.h): the token embedding of one
// given position, writing one position of a key/value cache, and gathering cache blocks (beam
// reorder).
#pragma once

#include <cstdint>

#include "kernels/tensor.h"

namespace nmt {

// ids:   [rows] i32, every row at position `position` of its sentence
// table: [vocab, d_model]
// out:   [rows, d_model] written: table[id] * scale + sinusoid(position), bit for bit what
//        embedding_forward writes for a row at that position; pad rows are all zeros.
void embedding_forward_at(const Tensor& ids, const Tensor& table, Tensor& out, int64_t position,
                          float scale, int32_t pad_id);

// x:     [rows, width]
// cache: [rows, cache_len, width], same dtype and device; cache[r, position, :] = x[r, :].
// Any dtype (a copy).
void cache_write_position(const Tensor& x, Tensor& cache, int64_t position);

// src:   [src_blocks, block_len, width]
// index: [n] i32 on the tensors' device, each in [0, src_blocks) (checked on the CPU; on the GPU
//        an index outside that range leaves its destination block untouched)
// dst:   [dst_blocks >= n, block_len, width], same dtype, must not overlap src.
// dst[i, t, :] = src[index[i], t, :] for i < n, t < used_len. Any dtype (a copy).
void gather_blocks(const Tensor& src, const Tensor& index, Tensor& dst, int64_t used_len);

}  // namespace nmt
