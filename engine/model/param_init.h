// Initialisation schemes for the Transformer's parameters (`model.init`): which distribution each
// parameter is drawn from, by its role (attention q/k/v, attention output, feed-forward in/out, in
// the encoder or decoder stack). The draws are deterministic from the seed (Philox, one stream per
// parameter), so every backend and rank starts from the same weights. docs/config.md lists the
// schemes; docs/perf.md has the study that chose the default.
#pragma once

#include <cstdint>
#include <string>

#include "engine/config/config.h"  // InitScheme

namespace nmt {

// What a parameter is, read from its PyTorch/fairseq-style name
// (`decoder.layers.2.encoder_attn.v_proj.weight`).
enum class ParamRole : uint8_t {
  attn_q,
  attn_k,
  attn_v,
  attn_out,
  ffn_in,
  ffn_out,
  other,  // embeddings, layer norms
};

struct ParamRoleOf {
  ParamRole role = ParamRole::other;
  bool decoder = false;  // the parameter lives in the decoder stack
  bool bias = false;     // `.bias` rather than `.weight`
};
ParamRoleOf param_role_of(const std::string& name);

// The stack sizes the depth-aware schemes scale by (`scaled`, `small`, `deepnet`).
struct InitDepth {
  int64_t encoder_layers = 6;
  int64_t decoder_layers = 6;
};

// How one parameter is drawn: uniform on [-bound, bound], normal with standard deviation `stddev`,
// or the constant `value`.
struct InitDraw {
  enum class Kind : uint8_t { uniform, normal, constant } kind = Kind::constant;
  double bound = 0.0;
  double stddev = 0.0;
  double value = 0.0;
};

// The draw for a [fan_out, fan_in] weight (or a [fan_out] bias whose weight has that fan_in) of
// the given role under `scheme`; `d_model` is the width SmallInit scales by.
InitDraw init_draw(InitScheme scheme, const ParamRoleOf& role, double fan_in, double fan_out,
                   int64_t d_model, const InitDepth& depth);

}  // namespace nmt
