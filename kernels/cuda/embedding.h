// The CUDA token embedding (kernels/embedding.h dispatches here with the same signatures),
// enqueued on the current stream (kernels/cuda/stream.h) without synchronising.
// Dtype contract (docs/cuda.md): T is the call's activation dtype (f32, bf16 or f16, one per call);
// parameter gradients and saved statistics are f32; reductions accumulate in fp32 or wider.
#pragma once

#include <cstdint>

#include "kernels/embedding.h"
#include "kernels/tensor.h"

namespace nmt::cuda {

// ids: [rows] i32; table: [vocab, d_model] T; out: [rows, d_model] T. An id outside [0, vocab) is
// treated like pad_id (a zero row) rather than read out of bounds: ids are checked on the host.
void embedding_forward(const Tensor& ids, const Tensor& table, Tensor& out, int64_t seq_len,
                       float scale, int32_t pad_id, const EmbeddingDropout& dropout = {});
// d_out: [rows, d_model] T; d_table: [vocab, d_model] f32, accumulated (+=) deterministically.
// dropout, order: as kernels/embedding.h describes them.
void embedding_backward(const Tensor& ids, const Tensor& d_out, Tensor& d_table, float scale,
                        int32_t pad_id, const EmbeddingDropout& dropout = {},
                        const EmbeddingRowOrder* order = nullptr);

}  // namespace nmt::cuda
