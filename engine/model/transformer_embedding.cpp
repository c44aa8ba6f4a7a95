// Transformer's token embeddings in training (declared in engine/model/transformer.h): the
// embedding ops with their dropout inside them, and the backward's row orders taken from the batch
// (data/batch.h add_row_orders), uploaded with it, so a GPU step sorts nothing.
#include <cmath>
#include <vector>

#include "engine/model/transformer.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/env_switch.h"

namespace nmt {
namespace {

// The embeddings' dropout inside the embedding ops, and (on the GPU) their backward's row order
// taken from the batch (made where the batch was built, data/batch.h); NMT_EMBEDDING_FUSED=0 runs
// the dropout ops beside them and sorts on the device instead (the same bits; for comparing).
EnvSwitch embedding_fused_switch("NMT_EMBEDDING_FUSED", /*default_on=*/true);

}  // namespace

void set_embedding_fused(bool on) {
  embedding_fused_switch.set(on);
}

bool embedding_fused() {
  return embedding_fused_switch.get();
}

void Transformer::embed(const Tensor& ids, const Param& table, Tensor& out, int64_t seq_len,
                        const EmbeddingDropout& dropout) const {
  const float scale = std::sqrt(static_cast<float>(shape_.d_model));
  if (embedding_fused())
    return embedding_forward(ids, table.compute, out, seq_len, scale, kPadId, dropout);
  embedding_forward(ids, table.compute, out, seq_len, scale, kPadId);
  if (dropout.p > 0) dropout_forward(out, out, dropout.p, dropout.key);
}

void Transformer::embed_backward(const Tensor& ids, Tensor& d_out, Param& table,
                                 const EmbeddingDropout& dropout, bool target) const {
  const float scale = std::sqrt(static_cast<float>(shape_.d_model));
  if (!embedding_fused()) {
    if (dropout.p > 0) dropout_backward(d_out, d_out, dropout.p, dropout.key);
    return embedding_backward(ids, d_out, table.grad, scale, kPadId);
  }
  const EmbeddingRowOrder order = row_orders_ ? row_order(target) : EmbeddingRowOrder{};
  embedding_backward(ids, d_out, table.grad, scale, kPadId, dropout,
                     row_orders_ ? &order : nullptr);
}

bool Transformer::take_row_orders(const Batch& batch) {
  const int64_t s_rows = batch_ * src_len_, t_rows = batch_ * tgt_len_;
  row_orders_ = device_ == Device::cuda && embedding_fused() && row_orders_buffer_.capacity > 0 &&
                static_cast<int64_t>(batch.src_order.size()) == 2 * s_rows &&
                static_cast<int64_t>(batch.tgt_order.size()) == 2 * t_rows;
  return row_orders_;
}

void Transformer::upload_row_orders(const Batch& batch) {
  if (!take_row_orders(batch)) return;
  const int64_t s_rows = batch_ * src_len_;
  const auto put = [&](const std::vector<int32_t>& host, int64_t first) {
    Tensor src(const_cast<int32_t*>(host.data()), DType::i32, Device::cpu,
               {static_cast<int64_t>(host.size())});
    Tensor dst(static_cast<int32_t*>(row_orders_buffer_.data) + first, DType::i32, device_,
               {static_cast<int64_t>(host.size())});
    copy_tensor(src, dst);
  };
  put(batch.src_order, 0);
  put(batch.tgt_order, 2 * s_rows);
}

EmbeddingRowOrder Transformer::row_order(bool target) const {
  const int64_t s_rows = batch_ * src_len_, t_rows = batch_ * tgt_len_;
  const int64_t first = target ? 2 * s_rows : 0, n = target ? t_rows : s_rows;
  auto* base = static_cast<int32_t*>(row_orders_buffer_.data) + first;
  return EmbeddingRowOrder{Tensor(base, DType::i32, device_, {n}),
                           Tensor(base + n, DType::i32, device_, {n})};
}

}  // namespace nmt
