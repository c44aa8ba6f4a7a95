// The tiny training run the engine, data-parallel and decoding suites start from: the synthetic
// reversal task, one encoder and one decoder layer (d_model 32, 4 heads, FFN 64), CPU, fp32.
// Each suite then sets what it tests (steps, schedule, dropout, device).
#pragma once

#include "engine/config/config.h"

namespace nmt::test {

inline RunConfig tiny_reverse_config() {
  RunConfig c;
  c.data.train = "synthetic:reverse";
  c.data.synthetic_train_pairs = 2000;
  c.data.synthetic_dev_pairs = 40;
  c.data.synthetic_max_len = 8;
  c.model.encoder_layers = c.model.decoder_layers = 1;
  c.model.d_model = 32;
  c.model.num_heads = 4;
  c.model.ffn_dim = 64;
  c.train.device = Device::cpu;
  c.train.precision = DType::f32;
  c.train.batch_tokens = 512;
  return c;
}

}  // namespace nmt::test
