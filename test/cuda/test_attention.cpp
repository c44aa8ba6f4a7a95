// CUDA attention against the CPU reference: padding masks (a fully masked sentence included),
// causal masks, cross-attention lengths, dropout with the shared RNG, forward and backward.
#include <vector>

#include "kernels/attention.h"
#include "kernels/cuda/attention.h"
#include "test/cuda/gpu_test_util.h"
#include "test/support/catch.h"

namespace nmt::test {
namespace {

struct CpuAttention {
  std::vector<float> out, probs, dq, dk, dv;
};

CpuAttention cpu_attention(std::vector<float> q, std::vector<float> k, std::vector<float> v,
                           std::vector<float> d_out, std::vector<int32_t> lengths,
                           const AttentionShape& s, float p, const RngKey& key) {
  const int64_t width = s.heads * s.head_dim, q_rows = s.batch * s.q_len,
                kv_rows = s.batch * s.kv_len;
  CpuAttention r;
  r.out.resize(q_rows * width);
  r.probs.resize(s.batch * s.heads * s.q_len * s.kv_len);
  r.dq.resize(q_rows * width);
  r.dk.resize(kv_rows * width);
  r.dv.resize(kv_rows * width);
  Tensor out = cpu_view(r.out, {q_rows, width}),
         probs = cpu_view(r.probs, {s.batch, s.heads, s.q_len, s.kv_len}),
         dq = cpu_view(r.dq, {q_rows, width}), dk = cpu_view(r.dk, {kv_rows, width}),
         dv = cpu_view(r.dv, {kv_rows, width});
  const Tensor qv = cpu_view(q, {q_rows, width}), kv = cpu_view(k, {kv_rows, width}),
               vv = cpu_view(v, {kv_rows, width}), len = cpu_view_i32(lengths, {s.batch});
  attention_forward(qv, kv, vv, len, out, probs, s, p, key);
  attention_backward(cpu_view(d_out, {q_rows, width}), qv, kv, vv, probs, len, dq, dk, dv, s, p,
                     key);
  return r;
}

}  // namespace

TEST_CASE("cuda attention matches the CPU reference", "[cuda][attention]") {
  struct Case {
    AttentionShape shape;
    std::vector<int32_t> lengths;
  };
  const Case cases[] = {
      {{1, 1, 1, 1, 1, false}, {1}},
      {{2, 5, 7, 3, 8, false}, {7, 3}},     // cross-attention, padded keys
      {{3, 9, 9, 2, 16, true}, {9, 4, 0}},  // causal self-attention, an empty sentence
      {{4, 33, 17, 4, 64, false}, {17, 1, 16, 10}},
      {{2, 64, 64, 8, 64, true}, {64, 50}},
  };
  const RngKey key{99, 12, 3};
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
    for (const Case& c : cases)
      for (float p : {0.0f, 0.2f}) {
        const AttentionShape& s = c.shape;
        INFO("dtype " << dtype_name(dtype) << " batch " << s.batch << " q_len " << s.q_len
                      << " kv_len " << s.kv_len << " heads " << s.heads << " head_dim "
                      << s.head_dim << " causal " << s.causal << " dropout " << p);
        const int64_t width = s.heads * s.head_dim, q_rows = s.batch * s.q_len,
                      kv_rows = s.batch * s.kv_len;
        const uint64_t seed = static_cast<uint64_t>(q_rows * 17 + kv_rows * 5 + width);
        std::vector<float> q = random_floats(q_rows * width, seed, -1.5f, 1.5f),
                           k = random_floats(kv_rows * width, seed + 1, -1.5f, 1.5f),
                           v = random_floats(kv_rows * width, seed + 2),
                           d_out = random_floats(q_rows * width, seed + 3);
        const CpuAttention ref = cpu_attention(q, k, v, d_out, c.lengths, s, p, key);
        const CpuAttention base =
            cpu_attention(rounded(q, dtype), rounded(k, dtype), rounded(v, dtype),
                          rounded(d_out, dtype), c.lengths, s, p, key);

        GpuTensor gq = upload(q, {q_rows, width}, dtype), gk = upload(k, {kv_rows, width}, dtype),
                  gv = upload(v, {kv_rows, width}, dtype),
                  gdo = upload(d_out, {q_rows, width}, dtype),
                  glen = upload_i32(c.lengths, {s.batch});
        GpuTensor gout = gpu_poisoned({q_rows, width}, dtype),
                  gprobs = gpu_poisoned({s.batch, s.heads, s.q_len, s.kv_len}, DType::f32);
        cuda::attention_forward(gq.view, gk.view, gv.view, glen.view, gout.view, gprobs.view, s, p,
                                key);
        check_close("out", dtype, download(gout.view), ref.out, rounded(base.out, dtype), 2.0);
        check_close("probs", dtype, download(gprobs.view), ref.probs, base.probs, 2.0);

        GpuTensor gdq = gpu_poisoned({q_rows, width}, dtype),
                  gdk = gpu_poisoned({kv_rows, width}, dtype),
                  gdv = gpu_poisoned({kv_rows, width}, dtype);
        cuda::attention_backward(gdo.view, gq.view, gk.view, gv.view, gprobs.view, glen.view,
                                 gdq.view, gdk.view, gdv.view, s, p, key);
        // Gradients pass through the rounded probabilities and score gradients: 3x, as
        // flash-attention's tests allow for gradients.
        check_close("dq", dtype, download(gdq.view), ref.dq, rounded(base.dq, dtype), 3.0);
        check_close("dk", dtype, download(gdk.view), ref.dk, rounded(base.dk, dtype), 3.0);
        check_close("dv", dtype, download(gdv.view), ref.dv, rounded(base.dv, dtype), 3.0);
      }
}

}  // namespace nmt::test
