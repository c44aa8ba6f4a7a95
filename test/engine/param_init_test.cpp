// Initialisation schemes (model.init): every projection of a real Transformer is drawn from the
// distribution its scheme names, which the test recomputes from the formulas (not from
// engine/model/param_init.cpp): mean, standard deviation and range of each weight and bias, on the
// CPU.
#include "engine/model/param_init.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "engine/model/transformer.h"
#include "test/support/catch.h"

namespace {

constexpr int64_t kD = 96, kFfn = 384, kEncoder = 2, kDecoder = 3;

nmt::ModelShape test_shape(bool pre_norm) {
  nmt::ModelShape s;
  s.vocab = 40;
  s.d_model = kD;
  s.heads = 4;
  s.ffn_dim = kFfn;
  s.encoder_layers = kEncoder;
  s.decoder_layers = kDecoder;
  s.pre_norm = pre_norm;
  return s;
}

struct Stats {
  double mean = 0, stddev = 0, max_abs = 0;
};

Stats stats_of(const nmt::Param& p) {
  const float* x = static_cast<const float*>(p.value.data);
  double sum = 0, sq = 0, max_abs = 0;
  for (int64_t i = 0; i < p.numel; ++i) {
    sum += x[i];
    sq += double(x[i]) * x[i];
    max_abs = std::max(max_abs, std::fabs(double(x[i])));
  }
  const double mean = sum / p.numel;
  return {mean, std::sqrt(sq / p.numel - mean * mean), max_abs};
}

bool has(const std::string& name, const std::string& part) {
  return name.find(part) != std::string::npos;
}

// The expected distribution, written out from the scheme definitions in docs/config.md.
struct Expected {
  bool uniform = true;
  double scale = 0;  // the uniform bound, or the normal standard deviation; 0 = all zeros
};

Expected expected_for(nmt::InitScheme scheme, const std::string& name) {
  const bool bias = has(name, ".bias"), decoder = name.rfind("decoder.", 0) == 0;
  const bool qkv = has(name, "q_proj") || has(name, "k_proj") || has(name, "v_proj");
  const bool out = has(name, "out_proj"), fc1 = has(name, "fc1"), fc2 = has(name, "fc2");
  const double d = kD, f = kFfn, layers = decoder ? kDecoder : kEncoder;
  const double fan_in = fc2 ? f : d, fan_out = fc1 ? f : d;
  const double xavier = std::sqrt(6.0 / (fan_in + fan_out));
  using S = nmt::InitScheme;
  switch (scheme) {
    case S::xavier:
      return {true, bias ? 0 : xavier};
    case S::torch:
    case S::torch_copies:
    case S::scaled: {
      double bound =
          qkv ? (bias ? 0 : std::sqrt(6.0 / (4 * d))) : (out && bias ? 0 : 1.0 / std::sqrt(fan_in));
      if (scheme == S::scaled && !bias && (out || fc2))
        bound /= std::sqrt(layers * (decoder ? 3 : 2));
      return {true, bound};
    }
    case S::fairseq:
      return {true, bias ? 0 : (qkv ? xavier / std::sqrt(2.0) : xavier)};
    case S::small:
      return {false,
              bias ? 0 : (out || fc2 ? 2 / (layers * std::sqrt(d)) : std::sqrt(2 / (5 * d)))};
    case S::deepnet: {
      const double beta = decoder ? std::pow(12.0 * kDecoder, -0.25)
                                  : 0.87 * std::pow(std::pow(kEncoder, 4.0) * kDecoder, -1 / 16.0);
      const bool qk = has(name, "q_proj") || has(name, "k_proj");
      return {false, bias ? 0 : (qk ? 1 : beta) * std::sqrt(2.0 / (fan_in + fan_out))};
    }
  }
  return {};
}

}  // namespace

TEST_CASE("each init scheme draws every projection from its distribution", "[cpu][init]") {
  using S = nmt::InitScheme;
  for (S scheme :
       {S::xavier, S::torch, S::torch_copies, S::fairseq, S::scaled, S::small, S::deepnet}) {
    nmt::Transformer model(test_shape(scheme == S::torch), nmt::Device::cpu, 16, 8);
    model.params().initialize(3, scheme);
    int checked = 0;
    for (const nmt::Param& p : model.params().params()) {
      INFO("scheme " << nmt::config_name(scheme) << ", " << p.name);
      const Stats s = stats_of(p);
      if (p.kind == nmt::ParamKind::norm_gain) {
        CHECK(s.mean == 1.0);
        CHECK(s.stddev == 0.0);
        continue;
      }
      if (p.kind == nmt::ParamKind::norm_bias) {
        CHECK(s.max_abs == 0.0);
        continue;
      }
      if (p.kind == nmt::ParamKind::embedding) {
        CHECK(s.stddev == Approx(1.0 / std::sqrt(double(kD))).epsilon(0.03));
        continue;
      }
      const Expected e = expected_for(scheme, p.name);
      ++checked;
      if (e.scale == 0) {
        CHECK(s.max_abs == 0.0);
        continue;
      }
      const double stddev = e.uniform ? e.scale / std::sqrt(3.0) : e.scale;
      // A bias has only d or ffn draws: wider tolerances there.
      const double tolerance = p.numel < 1000 ? 0.12 : 0.03;
      CHECK(s.stddev == Approx(stddev).epsilon(tolerance));
      CHECK(std::fabs(s.mean) < 5 * stddev / std::sqrt(double(p.numel)));
      if (e.uniform) {
        CHECK(s.max_abs <= e.scale);
        CHECK(s.max_abs > (p.numel < 1000 ? 0.9 : 0.99) * e.scale);
      } else {
        CHECK(s.max_abs > 2.5 * stddev);  // normal tails, not a clipped uniform
      }
    }
    // q/k/v/out of 2 self + 3 self + 3 cross attentions, fc1/fc2: weight and bias each.
    CHECK(checked == 2 * (4 * (kEncoder + 2 * kDecoder) + 2 * (kEncoder + kDecoder)));
  }
}

TEST_CASE("initialisation depends on the seed only, and xavier is the store's default",
          "[cpu][init]") {
  auto weights = [](uint64_t seed, nmt::InitScheme scheme) {
    nmt::Transformer model(test_shape(true), nmt::Device::cpu, 16, 8);
    model.params().initialize(seed, scheme);
    const float* x = static_cast<const float*>(model.params().master().data);
    return std::vector<float>(x, x + model.params().total_elements());
  };
  CHECK(weights(5, nmt::InitScheme::torch) == weights(5, nmt::InitScheme::torch));
  CHECK(weights(5, nmt::InitScheme::torch) != weights(6, nmt::InitScheme::torch));
  nmt::Transformer model(test_shape(true), nmt::Device::cpu, 16, 8);
  model.params().initialize(5);
  const float* x = static_cast<const float*>(model.params().master().data);
  CHECK(std::vector<float>(x, x + model.params().total_elements()) ==
        weights(5, nmt::InitScheme::xavier));
}

TEST_CASE("torch_copies starts every layer of a stack as a copy of its first", "[cpu][init]") {
  nmt::Transformer copies(test_shape(true), nmt::Device::cpu, 16, 8);
  copies.params().initialize(4, nmt::InitScheme::torch_copies);
  nmt::Transformer drawn(test_shape(true), nmt::Device::cpu, 16, 8);
  drawn.params().initialize(4, nmt::InitScheme::torch);
  auto values = [](nmt::Transformer& m, const std::string& name) {
    const nmt::Param* p = m.params().find(name);
    REQUIRE(p);
    const float* x = static_cast<const float*>(p->value.data);
    return std::vector<float>(x, x + p->numel);
  };
  for (const std::string& stack : std::vector<std::string>{"encoder", "decoder"}) {
    const int layers = stack == "encoder" ? kEncoder : kDecoder;
    for (const std::string& part :
         std::vector<std::string>{"self_attn.q_proj.weight", "self_attn.out_proj.weight",
                                  "fc1.weight", "fc1.bias", "fc2.weight"}) {
      const std::string first = stack + ".layers.0." + part;
      INFO(first);
      // Layer 0 is the per-layer scheme's layer 0; every later layer repeats it.
      CHECK(values(copies, first) == values(drawn, first));
      for (int layer = 1; layer < layers; ++layer) {
        const std::string name = stack + ".layers." + std::to_string(layer) + "." + part;
        CHECK(values(copies, name) == values(copies, first));
        CHECK(values(drawn, name) != values(drawn, first));
      }
    }
  }
  CHECK(values(copies, "decoder.layers.1.encoder_attn.k_proj.weight") ==
        values(copies, "decoder.layers.0.encoder_attn.k_proj.weight"));
  CHECK(values(copies, "encoder.layers.0.fc1.weight") !=
        values(copies, "decoder.layers.0.fc1.weight"));
}

TEST_CASE("parameter roles are read from the PyTorch-style names", "[cpu][init]") {
  using R = nmt::ParamRole;
  auto role = [](const std::string& n) { return nmt::param_role_of(n); };
  CHECK(role("encoder.layers.0.self_attn.q_proj.weight").role == R::attn_q);
  CHECK(!role("encoder.layers.0.self_attn.q_proj.weight").decoder);
  CHECK(role("decoder.layers.2.encoder_attn.v_proj.bias").role == R::attn_v);
  CHECK(role("decoder.layers.2.encoder_attn.v_proj.bias").decoder);
  CHECK(role("decoder.layers.2.encoder_attn.v_proj.bias").bias);
  CHECK(role("decoder.layers.1.self_attn.out_proj.weight").role == R::attn_out);
  CHECK(role("encoder.layers.1.fc1.weight").role == R::ffn_in);
  CHECK(role("decoder.layers.1.fc2.bias").role == R::ffn_out);
  CHECK(role("encoder.embed_tokens.weight").role == R::other);
  CHECK(role("decoder.layer_norm.weight").role == R::other);
}

TEST_CASE("initial values do not depend on the thread count", "[cpu][init]") {
  // The draws are spread over OpenMP threads (engine/model/param_store.cpp); each value depends
  // on its index alone.
  auto weights = [](int threads, nmt::InitScheme scheme) {
#ifdef _OPENMP
    const int was = omp_get_max_threads();
    omp_set_num_threads(threads);
#else
    (void)threads;
#endif
    nmt::Transformer model(test_shape(false), nmt::Device::cpu, 16, 8);
    model.params().initialize(11, scheme);
#ifdef _OPENMP
    omp_set_num_threads(was);
#endif
    const float* x = static_cast<const float*>(model.params().master().data);
    return std::vector<float>(x, x + model.params().total_elements());
  };
  for (auto scheme : {nmt::InitScheme::torch_copies, nmt::InitScheme::xavier})
    CHECK(weights(1, scheme) == weights(3, scheme));
}
