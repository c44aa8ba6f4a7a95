// The per-role distributions of each initialisation scheme (engine/model/param_init.h).
#include "engine/model/param_init.h"

#include <cmath>
#include <stdexcept>

namespace nmt {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

InitDraw uniform(double bound) {
  return {.kind = InitDraw::Kind::uniform, .bound = bound};
}
InitDraw normal(double stddev) {
  return {.kind = InitDraw::Kind::normal, .stddev = stddev};
}
InitDraw zero() {
  return {};
}

double xavier_bound(double fan_in, double fan_out) {
  return std::sqrt(6.0 / (fan_in + fan_out));
}

bool is_attention_input(ParamRole r) {
  return r == ParamRole::attn_q || r == ParamRole::attn_k || r == ParamRole::attn_v;
}
bool is_branch_output(ParamRole r) {
  return r == ParamRole::attn_out || r == ParamRole::ffn_out;
}

// PyTorch's defaults for nn.TransformerEncoderLayer/DecoderLayer: MultiheadAttention draws its
// [3d, d] input projection Xavier-uniform as a whole (bound sqrt(6/(d + 3d))) with zero bias and
// zeroes the output projection's bias; every nn.Linear weight (attention output, linear1,
// linear2) is Kaiming-uniform with a = sqrt(5), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the
// feed-forward biases take the same bound.
InitDraw torch_draw(const ParamRoleOf& p, double fan_in, double fan_out) {
  if (is_attention_input(p.role))
    return p.bias ? zero() : uniform(xavier_bound(fan_in, 3 * fan_out));
  if (p.role == ParamRole::attn_out) return p.bias ? zero() : uniform(1.0 / std::sqrt(fan_in));
  return uniform(1.0 / std::sqrt(fan_in));  // linear1 / linear2, weight and bias
}

}  // namespace

ParamRoleOf param_role_of(const std::string& name) {
  ParamRoleOf p;
  p.decoder = name.rfind("decoder.", 0) == 0;
  p.bias = ends_with(name, ".bias");
  const std::string stem = name.substr(0, name.rfind('.'));  // drop .weight / .bias
  const bool attention = stem.find("_attn.") != std::string::npos;
  if (attention && ends_with(stem, ".q_proj"))
    p.role = ParamRole::attn_q;
  else if (attention && ends_with(stem, ".k_proj"))
    p.role = ParamRole::attn_k;
  else if (attention && ends_with(stem, ".v_proj"))
    p.role = ParamRole::attn_v;
  else if (attention && ends_with(stem, ".out_proj"))
    p.role = ParamRole::attn_out;
  else if (ends_with(stem, ".fc1"))
    p.role = ParamRole::ffn_in;
  else if (ends_with(stem, ".fc2"))
    p.role = ParamRole::ffn_out;
  return p;
}

InitDraw init_draw(InitScheme scheme, const ParamRoleOf& p, double fan_in, double fan_out,
                   int64_t d_model, const InitDepth& depth) {
  if (p.role == ParamRole::other)
    throw std::logic_error(
        "init_draw: a weight or bias that is no attention or feed-forward "
        "projection has no scheme");
  const double layers =
      static_cast<double>(p.decoder ? depth.decoder_layers : depth.encoder_layers);
  switch (scheme) {
    case InitScheme::xavier:
      return p.bias ? zero() : uniform(xavier_bound(fan_in, fan_out));
    case InitScheme::torch:
    case InitScheme::torch_copies:  // the copies are ParamStore::initialize's: same streams
      return torch_draw(p, fan_in, fan_out);
    case InitScheme::fairseq: {
      if (p.bias) return zero();
      const double gain = is_attention_input(p.role) ? 1.0 / std::sqrt(2.0) : 1.0;
      return uniform(gain * xavier_bound(fan_in, fan_out));
    }
    case InitScheme::scaled: {
      InitDraw draw = torch_draw(p, fan_in, fan_out);
      if (!p.bias && is_branch_output(p.role)) {
        // GPT-2: residual-branch outputs scaled by 1/sqrt(N), N the residual branches of the
        // stack (2 per encoder layer; self-attention, cross-attention, feed-forward per decoder
        // layer).
        const double branches = layers * (p.decoder ? 3.0 : 2.0);
        draw.bound /= std::sqrt(branches);
      }
      return draw;
    }
    case InitScheme::small: {
      if (p.bias) return zero();
      const double d = static_cast<double>(d_model);
      if (is_branch_output(p.role)) return normal(2.0 / (layers * std::sqrt(d)));  // Wang init
      return normal(std::sqrt(2.0 / (5.0 * d)));                                   // SmallInit
    }
    case InitScheme::deepnet: {
      if (p.bias) return zero();
      // DeepNet (Wang et al. 2022), encoder-decoder: beta_enc = 0.87 (N^4 M)^(-1/16),
      // beta_dec = (12 M)^(-1/4) with N encoder and M decoder layers; q and k keep gain 1.
      const double n = static_cast<double>(depth.encoder_layers);
      const double m = static_cast<double>(depth.decoder_layers);
      const double beta =
          p.decoder ? std::pow(12.0 * m, -0.25) : 0.87 * std::pow(n * n * n * n * m, -1.0 / 16.0);
      const double gain = (p.role == ParamRole::attn_q || p.role == ParamRole::attn_k) ? 1.0 : beta;
      return normal(gain * std::sqrt(2.0 / (fan_in + fan_out)));
    }
  }
  throw std::logic_error("init_draw: unknown scheme");
}

}  // namespace nmt
