// Counted matrix-product FLOPs of the Transformer, written out block by block like the graph.
#include "engine/model/flop_count.h"

namespace nmt {

BatchDims batch_dims(const Batch& batch) {
  return BatchDims{batch.sentences, batch.src_len, batch.tgt_len};
}

double forward_matmul_flops(const ModelShape& shape, const BatchDims& dims) {
  const double d = static_cast<double>(shape.d_model), ffn = static_cast<double>(shape.ffn_dim);
  const double vocab = static_cast<double>(shape.vocab);
  const double batch = static_cast<double>(dims.sentences);
  const double src_len = static_cast<double>(dims.src_len);
  const double tgt_len = static_cast<double>(dims.tgt_len);
  const double src_rows = batch * src_len, tgt_rows = batch * tgt_len;
  // x [rows, in] · Wᵀ [in, out]
  auto linear = [](double rows, double in, double out) { return 2 * rows * in * out; };
  // Scores [q_len, kv_len] and context [q_len, head_dim] per (sentence, head); heads * head_dim =
  // d.
  auto attention_core = [&](double q_len, double kv_len) {
    return 2 * (2 * batch * q_len * kv_len * d);
  };
  auto feed_forward = [&](double rows) { return linear(rows, d, ffn) + linear(rows, ffn, d); };

  const double encoder_layer =
      4 * linear(src_rows, d, d) + attention_core(src_len, src_len) + feed_forward(src_rows);
  const double decoder_self_attention =
      4 * linear(tgt_rows, d, d) + attention_core(tgt_len, tgt_len);
  const double decoder_cross_attention = 2 * linear(tgt_rows, d, d) +  // q_proj, out_proj
                                         2 * linear(src_rows, d, d) +  // k_proj, v_proj
                                         attention_core(tgt_len, src_len);
  const double decoder_layer =
      decoder_self_attention + decoder_cross_attention + feed_forward(tgt_rows);
  const double output_projection = linear(tgt_rows, d, vocab);
  return static_cast<double>(shape.encoder_layers) * encoder_layer +
         static_cast<double>(shape.decoder_layers) * decoder_layer + output_projection;
}

double training_flops(const ModelShape& shape, const BatchDims& dims) {
  return 3 * forward_matmul_flops(shape, dims);
}

}  // namespace nmt
