// CUDA fused attention against the CPU fp32 reference, judged by the error of the unfused CUDA
// attention in the same precision (outputs within 2x, gradients within 3x, plus a small floor):
// lengths 1..512 that are not multiples of the tile, ragged and empty sentences, causal and cross
// attention, dropout, head_dim 64 and 128, bf16 and f16, fused-KV, fused-QKV and unaligned
// layouts.
// Also: padded keys holding NaN are never read, backward is bit-for-bit deterministic, the
// dropout keep bits forward stores for backward are the mask, giving the same bits as drawing it,
// and the q, k, v bias gradients the short-sentence backward adds are the gradients' column sums,
// at once or at a PartialSumDeferral's flush.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/flash_attention/flash_attention.h"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/stream.h"
#include "kernels/fused_attention.h"
#include "test/cuda/gpu_test_util.h"
#include "test/support/catch.h"

namespace nmt::cuda::flash {
bool wgmma_kernels_usable();  // kernels/cuda/flash_attention/launch.cuh (a .cuh, not for a .cpp)
}  // namespace nmt::cuda::flash

namespace nmt::test {
namespace {

const RngKey kKey{4242, 77, 9};

struct Case {
  AttentionShape shape;
  std::vector<int32_t> lengths;  // [batch]
};

// Ragged lengths of `batch` sentences up to `len`, some empty.
std::vector<int32_t> ragged(int64_t batch, int64_t len) {
  std::vector<int32_t> lengths(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i)
    lengths[static_cast<size_t>(i)] = static_cast<int32_t>(i % 11 == 5 ? 0 : len - (i * 7) % len);
  return lengths;
}

std::vector<Case> cases() {
  auto shape = [](int64_t b, int64_t t, int64_t s, int64_t h, int64_t d, bool causal) {
    return AttentionShape{b, t, s, h, d, causal};
  };
  return {
      // More (sentence, head) items than the GPU holds blocks: the persistent short kernels
      // walk several items per block through both pipeline stages.
      {shape(100, 37, 45, 8, 64, false), ragged(100, 45)},
      {shape(90, 64, 64, 8, 64, true), ragged(90, 64)},
      {shape(1, 1, 1, 1, 64, false), {1}},
      {shape(2, 7, 33, 2, 64, false), {33, 5}},       // cross-attention, ragged
      {shape(3, 65, 65, 2, 64, true), {65, 20, 0}},   // causal, an empty sentence
      {shape(2, 64, 64, 8, 64, true), {64, 50}},      // the NMT tile
      {shape(2, 100, 129, 2, 64, false), {129, 64}},  // several key tiles, separate dQ
      {shape(2, 129, 100, 1, 64, true), {100, 1}},    // causal with T > S, one key
      {shape(1, 257, 257, 2, 64, true), {200}},       //
      {shape(2, 33, 512, 1, 64, false), {512, 300}},  // long keys
      {shape(1, 512, 512, 1, 64, true), {512}},       //
      {shape(2, 1, 100, 2, 64, false), {100, 37}},    // a decoding step
      {shape(2, 65, 65, 2, 128, true), {65, 30}},     // head_dim 128
      {shape(1, 200, 300, 2, 128, false), {257}},     //
      {shape(2, 33, 17, 1, 128, false), {17, 0}},     //
      {shape(2, 300, 512, 2, 64, false), {512, 77}},  // long queries: 128-query blocks
      {shape(2, 192, 192, 2, 64, false), {192, 70}},  //
      {shape(2, 200, 200, 2, 128, true), {200, 77}},  //
      {shape(3, 160, 9, 1, 128, false), {9, 0, 3}},   // one short key tile, an empty sentence
      // head_dim 128, causal, several tiles: the two-warpgroup wgmma blocks, where one group
      // skips the tiles its queries (dQ) or keys (dK/dV) do not reach; aligned layouts without
      // dropout (fused qkv) and with it (fused kv).
      {shape(1, 300, 300, 2, 128, true), {280}},
      {shape(2, 200, 200, 1, 128, true), {200, 150}},
      // Short enough for several sentences an item (short_pack.cuh): 2 of 32 tokens, causal; 2
      // of 16 queries and 24 keys with a last item of one; 4 of 13 (rows not at multiples of 8)
      // with a short last item; 8 of 8 queries and 5 keys at head_dim 128 (forward packed).
      {shape(40, 32, 32, 4, 64, true), ragged(40, 32)},
      {shape(37, 16, 24, 3, 64, false), ragged(37, 24)},
      {shape(19, 13, 13, 2, 64, true), ragged(19, 13)},
      {shape(9, 8, 5, 2, 128, false), ragged(9, 5)},
  };
}

// The cases above that the short kernels pack (q_len and kv_len at most 32).
std::vector<Case> packed_cases() {
  std::vector<Case> packed;
  for (const Case& c : cases())
    if (c.shape.q_len <= 32 && c.shape.kv_len <= 32 && c.shape.batch > 1) packed.push_back(c);
  return packed;
}

// Sets the packing switch for a test case and restores it after.
struct PackSwitchGuard {
  bool was = cuda::attention_pack();
  ~PackSwitchGuard() { cuda::set_attention_pack(was); }
};

enum class Layout { fused_kv, fused_qkv, unaligned };

const char* layout_name(Layout l) {
  return l == Layout::fused_kv ? "fused kv" : (l == Layout::fused_qkv ? "fused qkv" : "unaligned");
}

struct Dense {
  std::vector<float> q, k, v;
};

// Where each operand lives: q in a [q_rows, q_total] matrix at q_col, k and v in [kv_rows,
// kv_total] matrix; q shares that matrix in the fused QKV layout.
struct Placement {
  Layout layout;
  int64_t width, q_rows, kv_rows, q_total, kv_total, q_col, k_col, v_col;
  Placement(Layout l, const AttentionShape& s)
      : layout(l),
        width(s.heads * s.head_dim),
        q_rows(s.batch * s.q_len),
        kv_rows(s.batch * s.kv_len) {
    if (l == Layout::fused_kv) {  // q dense, k and v from one [rows, 2 * width] buffer
      q_total = width;
      kv_total = 2 * width;
      q_col = k_col = 0, v_col = width;
    } else if (l == Layout::fused_qkv) {  // one [rows, 3 * width] buffer (needs q_len == kv_len)
      q_total = kv_total = 3 * width;
      q_col = 0, k_col = width, v_col = 2 * width;
    } else {  // odd row strides and column offsets: the scalar (non-16-byte) path
      q_total = width + 1;
      kv_total = 2 * width + 1;
      q_col = 1, k_col = 0, v_col = width + 1;
    }
  }
  bool one_buffer() const { return layout == Layout::fused_qkv; }
};

void place(const std::vector<float>& dense, int64_t rows, int64_t width, std::vector<float>& wide,
           int64_t total, int64_t col) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c) wide[r * total + col + c] = dense[r * width + c];
}

std::vector<float> take(const std::vector<float>& wide, int64_t rows, int64_t width, int64_t total,
                        int64_t col) {
  std::vector<float> dense(rows * width);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c) dense[r * width + c] = wide[r * total + col + c];
  return dense;
}

// Every element outside the heads' columns is still NaN (the poison the buffer started with).
bool only_heads_written(const std::vector<float>& wide, int64_t rows, int64_t total,
                        std::vector<int64_t> cols, int64_t width) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < total; ++c) {
      bool inside = false;
      for (int64_t col : cols) inside = inside || (c >= col && c < col + width);
      if (!inside && !std::isnan(wide[r * total + c])) return false;
    }
  return true;
}

// check_close (gradients within 3x the unfused kernel's error), but first passes an error within
// an absolute floor of a few units in the last place of the dtype. Why: backward's delta =
// rowsum(dO * O) uses the stored, rounded output (as flash-attention does), so where the exact dS
// is 0 (a query with one visible key, whose P is 1) the fused gradient keeps a rounding residue
// that the unfused kernel, summing P * dP in f32, does not have. The floor: an RMS of eps / 4 per
// element and a largest error of 8 eps, eps = 2^-8 (bf16) or 2^-11 (f16).
void check_gradient_close(const std::string& what, DType dtype, const std::vector<float>& gpu,
                          const std::vector<float>& ref, const std::vector<float>& baseline) {
  const double eps = dtype == DType::bf16 ? 1.0 / 256 : 1.0 / 2048;
  double l2 = 0, max_abs = 0;
  bool finite = true;
  for (size_t i = 0; i < gpu.size() && i < ref.size(); ++i) {
    const double d = static_cast<double>(gpu[i]) - ref[i];
    finite = finite && std::isfinite(d);
    l2 += d * d;
    max_abs = std::max(max_abs, std::fabs(d));
  }
  l2 = std::sqrt(l2);
  const bool within_floor = gpu.size() == ref.size() && finite &&
                            l2 <= 0.25 * eps * std::sqrt(static_cast<double>(gpu.size())) &&
                            max_abs <= 8 * eps;
  if (!within_floor) check_close(what, dtype, gpu, ref, baseline, 3.0);
}

struct FusedResult {
  std::vector<float> out, lse, dq, dk, dv;
  bool untouched = true;
  bool kept_bits = false;      // forward stored the keep bits (only asked with keep_bits)
  std::vector<uint32_t> bits;  // what it stored
  bool biases_summed = false;  // backward added to the bias gradients (only asked with bias_grads)
  Dense bias_grads;            // [heads * head_dim] each after backward; those given only
  // With a deferral: the second passes it recorded, and the bias gradients before its flush.
  int64_t deferred = 0;
  Dense bias_before_flush;
};

// How run_fused treats the dropout keep bits: none given (drawn again in backward), given to
// forward and passed to backward when kept, or kept and then zeroed before backward (every key
// dropped: a backward that reads them gives dV = 0).
enum class Bits { drawn, kept, zeroed };

// Runs the fused op on the GPU in `dtype` with the operands placed per `layout`; with bias_grads
// (their initial values, [heads * head_dim] f32 each, empty for one not given), backward is given
// bias gradients to add the column sums to; with `deferral`, backward runs with it active
// (kernels/cuda/reduce.h), which is flushed after the bias gradients are read once.
FusedResult run_fused(const Dense& in, const std::vector<float>& d_out, const Case& c, DType dtype,
                      float p, Layout layout, Bits bits = Bits::drawn,
                      const Dense* bias_grads = nullptr,
                      cuda::PartialSumDeferral* deferral = nullptr) {
  const AttentionShape& s = c.shape;
  const Placement at(layout, s);
  std::vector<float> wide_q(at.q_rows * at.q_total, NAN), wide_kv(at.kv_rows * at.kv_total, NAN);
  std::vector<float>& q_home = at.one_buffer() ? wide_kv : wide_q;
  place(in.q, at.q_rows, at.width, q_home, at.q_total, at.q_col);
  place(in.k, at.kv_rows, at.width, wide_kv, at.kv_total, at.k_col);
  place(in.v, at.kv_rows, at.width, wide_kv, at.kv_total, at.v_col);
  GpuTensor g_q = upload(wide_q, {at.q_rows, at.q_total}, dtype),
            g_kv = upload(wide_kv, {at.kv_rows, at.kv_total}, dtype),
            g_len = upload_i32(c.lengths, {s.batch}),
            g_do = upload(d_out, {at.q_rows, at.width}, dtype);
  const Tensor& q_view = at.one_buffer() ? g_kv.view : g_q.view;
  AttentionOperands operands{q_view, g_kv.view, g_kv.view, at.q_col, at.k_col, at.v_col};
  GpuTensor g_out = gpu_poisoned({at.q_rows, at.width}, dtype),
            g_lse = gpu_poisoned({s.batch, s.heads, s.q_len}, DType::f32);
  const int64_t words = fused_attention_keep_bits_words(s);
  GpuTensor g_bits = upload_i32(std::vector<int32_t>(static_cast<size_t>(words), -1), {words});
  FusedResult r;
  r.kept_bits = fused_attention_forward(operands, g_len.view, g_out.view, g_lse.view, s, p, kKey,
                                        bits != Bits::drawn ? g_bits.view : Tensor());
  if (r.kept_bits && bits == Bits::zeroed)
    CUDA_CHECK(cudaMemset(g_bits.view.data, 0, g_bits.view.bytes()));

  GpuTensor g_dq = gpu_poisoned({at.q_rows, at.q_total}, dtype),
            g_dkv = gpu_poisoned({at.kv_rows, at.kv_total}, dtype);
  const Tensor& dq_view = at.one_buffer() ? g_dkv.view : g_dq.view;
  AttentionOperands grads{dq_view, g_dkv.view, g_dkv.view, at.q_col, at.k_col, at.v_col};
  GpuTensor g_bias_q, g_bias_k, g_bias_v;
  AttentionBiasGrads bias_views;
  auto give_bias = [&](const std::vector<float>& init, GpuTensor& g, Tensor& view) {
    if (init.empty()) return;
    g = upload(init, {at.width}, DType::f32);
    view = g.view;
  };
  if (bias_grads != nullptr) {
    give_bias(bias_grads->q, g_bias_q, bias_views.q);
    give_bias(bias_grads->k, g_bias_k, bias_views.k);
    give_bias(bias_grads->v, g_bias_v, bias_views.v);
  }
  {
    cuda::DeferPartialSums active(deferral);  // null: none (as outside any deferral)
    r.biases_summed =
        fused_attention_backward(g_do.view, operands, g_out.view, g_lse.view, g_len.view, grads, s,
                                 p, kKey, r.kept_bits ? g_bits.view : Tensor(), bias_views);
  }
  if (deferral != nullptr) {
    r.deferred = deferral->recorded();
    if (!bias_views.q.empty()) r.bias_before_flush.q = download(bias_views.q);
    if (!bias_views.k.empty()) r.bias_before_flush.k = download(bias_views.k);
    if (!bias_views.v.empty()) r.bias_before_flush.v = download(bias_views.v);
    deferral->flush(cuda::current_stream());
  }
  if (!bias_views.q.empty()) r.bias_grads.q = download(bias_views.q);
  if (!bias_views.k.empty()) r.bias_grads.k = download(bias_views.k);
  if (!bias_views.v.empty()) r.bias_grads.v = download(bias_views.v);
  if (r.kept_bits) {
    r.bits.resize(static_cast<size_t>(words));
    CUDA_CHECK(
        cudaMemcpy(r.bits.data(), g_bits.view.data, r.bits.size() * 4, cudaMemcpyDeviceToHost));
  }
  r.out = download(g_out.view);
  r.lse = download(g_lse.view);
  const std::vector<float> wide_dkv = download(g_dkv.view);
  const std::vector<float> wide_dq = at.one_buffer() ? wide_dkv : download(g_dq.view);
  r.dq = take(wide_dq, at.q_rows, at.width, at.q_total, at.q_col);
  r.dk = take(wide_dkv, at.kv_rows, at.width, at.kv_total, at.k_col);
  r.dv = take(wide_dkv, at.kv_rows, at.width, at.kv_total, at.v_col);
  if (!at.one_buffer())
    r.untouched = only_heads_written(wide_dq, at.q_rows, at.q_total, {at.q_col}, at.width);
  const std::vector<int64_t> kv_cols = at.one_buffer()
                                           ? std::vector<int64_t>{at.q_col, at.k_col, at.v_col}
                                           : std::vector<int64_t>{at.k_col, at.v_col};
  r.untouched =
      r.untouched && only_heads_written(wide_dkv, at.kv_rows, at.kv_total, kv_cols, at.width);
  return r;
}

struct Unfused {
  std::vector<float> out, dq, dk, dv;
};

// The unfused attention (kernels/attention.h) on the CPU in f32, or on the GPU in `dtype`.
Unfused run_unfused(const Dense& in, const std::vector<float>& d_out, const Case& c, DType dtype,
                    float p, Device device) {
  const AttentionShape& s = c.shape;
  const int64_t width = s.heads * s.head_dim, q_rows = s.batch * s.q_len,
                kv_rows = s.batch * s.kv_len;
  Unfused r;
  if (device == Device::cpu) {
    Dense x = in;
    std::vector<float> dout = d_out, probs(s.batch * s.heads * s.q_len * s.kv_len);
    std::vector<int32_t> lengths = c.lengths;
    r.out.resize(q_rows * width);
    r.dq.resize(q_rows * width);
    r.dk.resize(kv_rows * width);
    r.dv.resize(kv_rows * width);
    Tensor out = cpu_view(r.out, {q_rows, width}),
           pv = cpu_view(probs, {s.batch, s.heads, s.q_len, s.kv_len}),
           dq = cpu_view(r.dq, {q_rows, width}), dk = cpu_view(r.dk, {kv_rows, width}),
           dv = cpu_view(r.dv, {kv_rows, width});
    const Tensor qv = cpu_view(x.q, {q_rows, width}), kv = cpu_view(x.k, {kv_rows, width}),
                 vv = cpu_view(x.v, {kv_rows, width}), len = cpu_view_i32(lengths, {s.batch});
    attention_forward(qv, kv, vv, len, out, pv, s, p, kKey);
    attention_backward(cpu_view(dout, {q_rows, width}), qv, kv, vv, pv, len, dq, dk, dv, s, p,
                       kKey);
    return r;
  }
  GpuTensor gq = upload(in.q, {q_rows, width}, dtype), gk = upload(in.k, {kv_rows, width}, dtype),
            gv = upload(in.v, {kv_rows, width}, dtype), gdo = upload(d_out, {q_rows, width}, dtype),
            glen = upload_i32(c.lengths, {s.batch});
  GpuTensor gout = gpu_poisoned({q_rows, width}, dtype),
            gprobs = gpu_poisoned({s.batch, s.heads, s.q_len, s.kv_len}, DType::f32),
            gdq = gpu_poisoned({q_rows, width}, dtype), gdk = gpu_poisoned({kv_rows, width}, dtype),
            gdv = gpu_poisoned({kv_rows, width}, dtype);
  cuda::attention_forward(gq.view, gk.view, gv.view, glen.view, gout.view, gprobs.view, s, p, kKey);
  cuda::attention_backward(gdo.view, gq.view, gk.view, gv.view, gprobs.view, glen.view, gdq.view,
                           gdk.view, gdv.view, s, p, kKey);
  r.out = download(gout.view);
  r.dq = download(gdq.view);
  r.dk = download(gdk.view);
  r.dv = download(gdv.view);
  return r;
}

Dense random_inputs(const AttentionShape& s, uint64_t seed, DType dtype) {
  const int64_t width = s.heads * s.head_dim;
  return {rounded(random_floats(s.batch * s.q_len * width, seed, -1.5f, 1.5f), dtype),
          rounded(random_floats(s.batch * s.kv_len * width, seed + 1, -1.5f, 1.5f), dtype),
          rounded(random_floats(s.batch * s.kv_len * width, seed + 2), dtype)};
}

// log-sum-exp of the scaled visible scores from the CPU fused op (f32).
std::vector<float> cpu_lse(const Dense& in, const Case& c, float p) {
  const AttentionShape& s = c.shape;
  const int64_t width = s.heads * s.head_dim, q_rows = s.batch * s.q_len,
                kv_rows = s.batch * s.kv_len;
  Dense x = in;
  std::vector<int32_t> lengths = c.lengths;
  std::vector<float> out(q_rows * width), lse(s.batch * s.heads * s.q_len);
  Tensor out_view = cpu_view(out, {q_rows, width}),
         lse_view = cpu_view(lse, {s.batch, s.heads, s.q_len});
  AttentionOperands operands{cpu_view(x.q, {q_rows, width}), cpu_view(x.k, {kv_rows, width}),
                             cpu_view(x.v, {kv_rows, width})};
  fused_attention_forward(operands, cpu_view_i32(lengths, {s.batch}), out_view, lse_view, s, p,
                          kKey);
  return lse;
}

}  // namespace

TEST_CASE("cuda fused attention matches the CPU reference within the unfused kernel's error",
          "[cuda][fused_attention]") {
  const std::vector<Case> all = cases();
  for (size_t i = 0; i < all.size(); ++i) {
    const Case& c = all[i];
    const AttentionShape& s = c.shape;
    for (DType dtype : {DType::bf16, DType::f16})
      for (float p : {0.0f, 0.2f}) {
        // Alternate the layouts over the cases; fused QKV needs q_len == kv_len.
        Layout layout = static_cast<Layout>((i + (p > 0 ? 1 : 0)) % 3);
        if (layout == Layout::fused_qkv && s.q_len != s.kv_len) layout = Layout::fused_kv;
        INFO("dtype " << dtype_name(dtype) << " batch " << s.batch << " q_len " << s.q_len
                      << " kv_len " << s.kv_len << " heads " << s.heads << " head_dim "
                      << s.head_dim << " causal " << s.causal << " dropout " << p << " layout "
                      << layout_name(layout));
        const Dense in = random_inputs(s, 1000 + 7 * i, dtype);
        const std::vector<float> d_out =
            rounded(random_floats(s.batch * s.q_len * s.heads * s.head_dim, 2000 + i), dtype);
        const Unfused ref = run_unfused(in, d_out, c, dtype, p, Device::cpu);
        const Unfused naive = run_unfused(in, d_out, c, dtype, p, Device::cuda);
        const FusedResult fused = run_fused(in, d_out, c, dtype, p, layout);
        check_close("out", dtype, fused.out, ref.out, naive.out, 2.0);
        check_gradient_close("dq", dtype, fused.dq, ref.dq, naive.dq);
        check_gradient_close("dk", dtype, fused.dk, ref.dk, naive.dk);
        check_gradient_close("dv", dtype, fused.dv, ref.dv, naive.dv);
        CHECK(fused.untouched);
        const std::vector<float> lse = cpu_lse(in, c, p);
        size_t lse_mismatches = 0, first = 0;
        for (size_t j = 0; j < lse.size(); ++j) {
          const bool ok = std::isinf(lse[j]) ? fused.lse[j] == lse[j]
                                             : std::fabs(fused.lse[j] - lse[j]) <=
                                                   1e-3f * (1.0f + std::fabs(lse[j]));
          if (!ok && lse_mismatches++ == 0) first = j;
        }
        INFO("lse mismatches " << lse_mismatches << ", first [" << first << "] gpu "
                               << fused.lse[first] << " cpu " << lse[first]);
        CHECK(lse_mismatches == 0);
      }
  }
}

TEST_CASE("cuda fused attention never reads padded keys, and backward is deterministic",
          "[cuda][fused_attention]") {
  // Long sentences, and short ones that share items (short_pack.cuh).
  for (const Case& c : {Case{{2, 70, 130, 2, 64, false}, {130, 61}},
                        Case{{6, 16, 16, 2, 64, false}, {16, 9, 0, 16, 3, 11}}}) {
    const AttentionShape& s = c.shape;
    INFO("batch " << s.batch << " q_len " << s.q_len << " kv_len " << s.kv_len);
    const DType dtype = DType::bf16;
    const Dense in = random_inputs(s, 77, dtype);
    Dense poisoned = in;
    const int64_t width = s.heads * s.head_dim;
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t key = c.lengths[b]; key < s.kv_len; ++key)  // every sentence's padding rows
        for (int64_t d = 0; d < width; ++d) {
          poisoned.k[(b * s.kv_len + key) * width + d] = NAN;
          poisoned.v[(b * s.kv_len + key) * width + d] = NAN;
        }
    const std::vector<float> d_out = rounded(random_floats(s.batch * s.q_len * width, 78), dtype);
    for (Layout layout : {Layout::fused_kv, Layout::unaligned}) {
      INFO("layout " << layout_name(layout));
      const FusedResult clean = run_fused(in, d_out, c, dtype, 0.1f, layout);
      const FusedResult dirty = run_fused(poisoned, d_out, c, dtype, 0.1f, layout);
      const FusedResult again = run_fused(in, d_out, c, dtype, 0.1f, layout);
      check_identical("out", clean.out, dirty.out);
      check_identical("dq", clean.dq, dirty.dq);
      check_identical("dk", clean.dk, dirty.dk);  // padded keys: zero gradients either way
      check_identical("dv", clean.dv, dirty.dv);
      check_identical("dq twice", clean.dq, again.dq);
      check_identical("dk twice", clean.dk, again.dk);
      check_identical("dv twice", clean.dv, again.dv);
    }
  }
}

TEST_CASE("cuda fused attention keeps the dropout mask for backward: the same bits as drawing it",
          "[cuda][fused_attention]") {
  // Where the short-sentence wgmma kernels run (q_len, kv_len <= 64, head_dim 64, 16-byte rows,
  // dropout on), forward stores the keep bits and backward reads them; elsewhere forward says no.
  struct BitsCase {
    Case c;
    Layout layout;
    float p;
    bool kept;
  };
  const bool hopper = cuda::flash::wgmma_kernels_usable();
  const std::vector<BitsCase> all = {
      {{{100, 37, 45, 8, 64, false}, std::vector<int32_t>(100, 45)}, Layout::fused_kv, 0.2f, true},
      {{{90, 64, 64, 8, 64, true}, std::vector<int32_t>(90, 64)}, Layout::fused_qkv, 0.3f, true},
      {{{2, 7, 33, 2, 64, false}, {33, 5}}, Layout::fused_kv, 0.2f, true},
      {{{3, 1, 1, 1, 64, false}, {1, 0, 1}}, Layout::fused_kv, 0.5f, true},
      {{{37, 16, 24, 3, 64, false}, ragged(37, 24)}, Layout::fused_kv, 0.3f, true},  // packed
      {{{19, 13, 13, 2, 64, true}, ragged(19, 13)}, Layout::fused_qkv, 0.2f, true},  // packed
      {{{2, 64, 64, 8, 64, true}, {64, 50}}, Layout::fused_qkv, 0.0f, false},        // no dropout
      {{{2, 64, 64, 8, 64, true}, {64, 50}}, Layout::unaligned, 0.2f, false},        // scalar path
      {{{2, 65, 65, 2, 64, true}, {65, 20}}, Layout::fused_qkv, 0.2f, false},        // two tiles
      {{{2, 33, 17, 1, 128, false}, {17, 0}}, Layout::fused_kv, 0.2f, false},        // head_dim 128
  };
  for (size_t i = 0; i < all.size(); ++i) {
    const BitsCase& bc = all[i];
    const AttentionShape& s = bc.c.shape;
    INFO("batch " << s.batch << " q_len " << s.q_len << " kv_len " << s.kv_len << " head_dim "
                  << s.head_dim << " dropout " << bc.p << " layout " << layout_name(bc.layout));
    for (DType dtype : {DType::bf16, DType::f16}) {
      INFO("dtype " << dtype_name(dtype));
      const Dense in = random_inputs(s, 500 + i, dtype);
      const std::vector<float> d_out =
          rounded(random_floats(s.batch * s.q_len * s.heads * s.head_dim, 600 + i), dtype);
      const FusedResult drawn = run_fused(in, d_out, bc.c, dtype, bc.p, bc.layout);
      const FusedResult kept = run_fused(in, d_out, bc.c, dtype, bc.p, bc.layout, Bits::kept);
      CHECK(kept.kept_bits == (bc.kept && hopper));
      check_identical("out", kept.out, drawn.out);
      check_identical("lse", kept.lse, drawn.lse);
      check_identical("dq", kept.dq, drawn.dq);
      check_identical("dk", kept.dk, drawn.dk);
      check_identical("dv", kept.dv, drawn.dv);
      if (!kept.kept_bits) continue;
      // Bit s % 32 of word 2 * row + s / 32 is dropout_keep of element (row, s), row = (b * heads
      // + h) * q_len + t, for every visible position; keys past kv_len are not drawn: 0.
      size_t wrong = 0, set_past_kv_len = 0;
      for (int64_t row = 0; row < s.batch * s.heads * s.q_len; ++row)
        for (int64_t key = 0; key < 64; ++key) {
          const bool bit = (kept.bits[static_cast<size_t>(row * 2 + key / 32)] >> (key % 32)) & 1u;
          if (key >= s.kv_len) {
            set_past_kv_len += bit ? 1 : 0;
            continue;
          }
          const bool expected =
              dropout_keep(kKey, static_cast<uint64_t>(row * s.kv_len + key), bc.p);
          wrong += bit != expected ? 1 : 0;
        }
      CHECK(wrong == 0);
      CHECK(set_past_kv_len == 0);
      // The backward reads them: with every bit zeroed it drops every probability, so dV is 0
      // (and the drawn run's dV is not, but for the few-element shapes, where dropout may drop
      // every visible probability).
      const FusedResult zeroed = run_fused(in, d_out, bc.c, dtype, bc.p, bc.layout, Bits::zeroed);
      auto all_zero = [](const std::vector<float>& v) {
        return std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; });
      };
      CHECK(all_zero(zeroed.dv));
      if (s.batch * s.q_len * s.kv_len > 64) CHECK_FALSE(all_zero(drawn.dv));
    }
  }
}

// Columns j of a bias gradient `got` ([width]) that differ from init[j] + Σ_row grads[row, j]
// (summed in double over the [rows, width] gradient) by more than f32 summation's rounding,
// 1e-5 * (1 + Σ|x|).
size_t bias_sum_mismatches(const std::vector<float>& got, const std::vector<float>& init,
                           const std::vector<float>& grads, int64_t width) {
  if (got.size() != static_cast<size_t>(width)) return static_cast<size_t>(width);
  size_t wrong = 0;
  for (int64_t j = 0; j < width; ++j) {
    double sum = init[static_cast<size_t>(j)], magnitude = std::fabs(sum);
    for (size_t i = static_cast<size_t>(j); i < grads.size(); i += static_cast<size_t>(width)) {
      sum += grads[i];
      magnitude += std::fabs(grads[i]);
    }
    const double error = std::fabs(got[static_cast<size_t>(j)] - sum);
    wrong += error <= 1e-5 * (1.0 + magnitude) ? 0 : 1;  // NaN counts as wrong
  }
  return wrong;
}

// Room for the largest case's bias partials below: 100 sentences x 3 x 8 heads x 64.
constexpr int64_t kDeferralFloats = 200000;

TEST_CASE("cuda fused attention backward adds the bias gradients where the short wgmma runs",
          "[cuda][fused_attention]") {
  // Where the short-sentence wgmma backward runs (q_len, kv_len <= 64, head_dim 64, 16-byte
  // rows), it adds the column sums of dQ, dK, dV to the bias gradients and returns true;
  // elsewhere it returns false and leaves them alone. Either way dQ, dK, dV keep their bits, and
  // an active PartialSumDeferral holds the sums' second pass back to its flush.
  struct BiasCase {
    Case c;
    Layout layout;
    bool summed;
  };
  const bool hopper = cuda::flash::wgmma_kernels_usable();
  const std::vector<BiasCase> all = {
      {{{4, 64, 64, 8, 64, false}, {64, 50, 0, 17}}, Layout::fused_qkv, true},   // an empty one
      {{{3, 37, 37, 2, 64, true}, {37, 1, 30}}, Layout::fused_qkv, true},        // causal, odd
      {{{100, 37, 45, 8, 64, false}, ragged(100, 45)}, Layout::fused_kv, true},  // cross
      // More sentences than the sums' kernel stages at once (kSumChunk, 128).
      {{{150, 7, 33, 2, 64, false}, ragged(150, 33)}, Layout::fused_kv, true},
      {{{3, 1, 1, 1, 64, false}, {1, 0, 1}}, Layout::fused_kv, true},          // kv_len 1
      {{{37, 16, 24, 3, 64, false}, ragged(37, 24)}, Layout::fused_kv, true},  // packed, cross
      {{{19, 13, 13, 2, 64, true}, ragged(19, 13)}, Layout::fused_qkv, true},  // packed, causal
      {{{2, 5, 1, 2, 64, true}, {1, 1}}, Layout::fused_kv, true},              // kv_len 1, causal
      {{{2, 64, 64, 8, 64, true}, {64, 50}}, Layout::unaligned, false},        // scalar path
      {{{2, 65, 65, 2, 64, true}, {65, 20}}, Layout::fused_qkv, false},        // two tiles
      {{{2, 33, 17, 1, 128, false}, {17, 0}}, Layout::fused_kv, false},        // head_dim 128
  };
  for (size_t i = 0; i < all.size(); ++i)
    for (float p : {0.0f, 0.2f}) {
      const BiasCase& bc = all[i];
      const AttentionShape& s = bc.c.shape;
      INFO("batch " << s.batch << " q_len " << s.q_len << " kv_len " << s.kv_len << " head_dim "
                    << s.head_dim << " causal " << s.causal << " dropout " << p << " layout "
                    << layout_name(bc.layout));
      const DType dtype = DType::bf16;
      const int64_t width = s.heads * s.head_dim;
      const Dense in = random_inputs(s, 800 + i, dtype);
      const std::vector<float> d_out =
          rounded(random_floats(s.batch * s.q_len * width, 900 + i), dtype);
      const Dense init{random_floats(width, 950 + i), random_floats(width, 960 + i),
                       random_floats(width, 970 + i)};
      const Dense without_k{init.q, {}, init.v};
      const FusedResult plain = run_fused(in, d_out, bc.c, dtype, p, bc.layout, Bits::kept);
      const FusedResult with = run_fused(in, d_out, bc.c, dtype, p, bc.layout, Bits::kept, &init);
      const FusedResult again = run_fused(in, d_out, bc.c, dtype, p, bc.layout, Bits::kept, &init);
      const FusedResult some =
          run_fused(in, d_out, bc.c, dtype, p, bc.layout, Bits::kept, &without_k);
      const bool summed = bc.summed && hopper;
      CHECK_FALSE(plain.biases_summed);
      CHECK(with.biases_summed == summed);
      CHECK(some.biases_summed == summed);
      check_identical("dq", with.dq, plain.dq);
      check_identical("dk", with.dk, plain.dk);
      check_identical("dv", with.dv, plain.dv);
      check_identical("bias q twice", with.bias_grads.q, again.bias_grads.q);
      check_identical("bias k twice", with.bias_grads.k, again.bias_grads.k);
      check_identical("bias v twice", with.bias_grads.v, again.bias_grads.v);
      check_identical("bias q without k", some.bias_grads.q, with.bias_grads.q);
      check_identical("bias v without k", some.bias_grads.v, with.bias_grads.v);
      // Under a deferral with room, the second pass waits for the flush and then gives the same
      // bits (a bias gradient not asked for stays out of it); without room it runs at once.
      DeviceBuffer room(kDeferralFloats * sizeof(float));
      cuda::PartialSumDeferral deferral(static_cast<float*>(room.data()), kDeferralFloats),
          no_room(static_cast<float*>(room.data()), 4);
      const FusedResult later =
          run_fused(in, d_out, bc.c, dtype, p, bc.layout, Bits::kept, &init, &deferral);
      const FusedResult some_later =
          run_fused(in, d_out, bc.c, dtype, p, bc.layout, Bits::kept, &without_k, &deferral);
      const FusedResult at_once =
          run_fused(in, d_out, bc.c, dtype, p, bc.layout, Bits::kept, &init, &no_room);
      CHECK(later.biases_summed == summed);
      CHECK(later.deferred == (summed ? 1 : 0));
      CHECK(some_later.deferred == (summed ? 1 : 0));
      CHECK(at_once.deferred == 0);
      check_identical("dq deferred", later.dq, plain.dq);
      check_identical("dk deferred", later.dk, plain.dk);
      check_identical("dv deferred", later.dv, plain.dv);
      check_identical("bias q before the flush", later.bias_before_flush.q, init.q);
      check_identical("bias k before the flush", later.bias_before_flush.k, init.k);
      check_identical("bias v before the flush", later.bias_before_flush.v, init.v);
      for (const FusedResult* r : {&later, &at_once}) {
        check_identical("bias q deferred or not", r->bias_grads.q, with.bias_grads.q);
        check_identical("bias k deferred or not", r->bias_grads.k, with.bias_grads.k);
        check_identical("bias v deferred or not", r->bias_grads.v, with.bias_grads.v);
      }
      check_identical("bias q deferred without k", some_later.bias_grads.q, with.bias_grads.q);
      check_identical("bias v deferred without k", some_later.bias_grads.v, with.bias_grads.v);
      if (summed) {
        CHECK(bias_sum_mismatches(with.bias_grads.q, init.q, with.dq, width) == 0);
        CHECK(bias_sum_mismatches(with.bias_grads.k, init.k, with.dk, width) == 0);
        CHECK(bias_sum_mismatches(with.bias_grads.v, init.v, with.dv, width) == 0);
      } else {
        check_identical("bias q untouched", with.bias_grads.q, init.q);
        check_identical("bias k untouched", with.bias_grads.k, init.k);
        check_identical("bias v untouched", with.bias_grads.v, init.v);
      }
    }
}

TEST_CASE("cuda fused attention: short sentences packed into items against one an item",
          "[cuda][fused_attention][pack]") {
  // Several sentences an item give each sentence its own item's dropout mask (the same keep bits),
  // log-sum-exp, output and gradients to rounding (the hardware adds a row's terms in another
  // order), and bias sums of the same rows in the same order; with the switch off every case
  // takes one sentence an item.
  PackSwitchGuard guard;
  const bool hopper = cuda::flash::wgmma_kernels_usable();
  for (const Case& c : packed_cases()) {
    const AttentionShape& s = c.shape;
    if (s.head_dim != 64) continue;  // the keep bits and bias sums are head_dim 64's
    INFO("batch " << s.batch << " q_len " << s.q_len << " kv_len " << s.kv_len << " causal "
                  << s.causal);
    const DType dtype = DType::bf16;
    const int64_t width = s.heads * s.head_dim;
    const Dense in = random_inputs(s, 3000, dtype);
    const std::vector<float> d_out = rounded(random_floats(s.batch * s.q_len * width, 3001), dtype);
    const Dense init{std::vector<float>(width, 0.0f), std::vector<float>(width, 0.0f),
                     std::vector<float>(width, 0.0f)};
    const Layout layout = s.q_len == s.kv_len ? Layout::fused_qkv : Layout::fused_kv;
    cuda::set_attention_pack(false);
    const FusedResult one = run_fused(in, d_out, c, dtype, 0.2f, layout, Bits::kept, &init);
    cuda::set_attention_pack(true);
    const FusedResult packed = run_fused(in, d_out, c, dtype, 0.2f, layout, Bits::kept, &init);
    const FusedResult again = run_fused(in, d_out, c, dtype, 0.2f, layout, Bits::kept, &init);
    CHECK(packed.kept_bits == hopper);
    if (!hopper) continue;
    CHECK(packed.bits == one.bits);
    // Equal infinities (an empty sentence's lse) match; NaN or any other non-finite value fails.
    auto close = [](const char* what, const std::vector<float>& a, const std::vector<float>& b) {
      double worst = 0, scale = 0;
      size_t not_finite = 0;
      for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        if (std::isinf(a[i]) && a[i] == b[i]) continue;
        const double difference = std::fabs(static_cast<double>(a[i]) - b[i]);
        if (!std::isfinite(difference)) {
          ++not_finite;
          continue;
        }
        worst = std::max(worst, difference);
        scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
      }
      INFO(what << ": largest difference " << worst << " of values up to " << scale << ", "
                << not_finite << " not finite");
      CHECK(a.size() == b.size());
      CHECK(not_finite == 0);
      CHECK(worst <= 0.02 * std::max(scale, 1.0));  // a few bf16 ulps of the largest value
    };
    close("out", packed.out, one.out);
    close("lse", packed.lse, one.lse);
    close("dq", packed.dq, one.dq);
    close("dk", packed.dk, one.dk);
    close("dv", packed.dv, one.dv);
    close("bias q", packed.bias_grads.q, one.bias_grads.q);
    close("bias k", packed.bias_grads.k, one.bias_grads.k);
    close("bias v", packed.bias_grads.v, one.bias_grads.v);
    CHECK(bias_sum_mismatches(packed.bias_grads.q, init.q, packed.dq, width) == 0);
    CHECK(bias_sum_mismatches(packed.bias_grads.k, init.k, packed.dk, width) == 0);
    CHECK(bias_sum_mismatches(packed.bias_grads.v, init.v, packed.dv, width) == 0);
    check_identical("out twice", packed.out, again.out);
    check_identical("dq twice", packed.dq, again.dq);
    check_identical("dk twice", packed.dk, again.dk);
    check_identical("dv twice", packed.dv, again.dv);
    check_identical("bias k twice", packed.bias_grads.k, again.bias_grads.k);
  }
}

TEST_CASE("cuda fused attention reports what it supports", "[cuda][fused_attention]") {
  CHECK(fused_attention_supported(Device::cuda, DType::bf16, 64));
  CHECK(fused_attention_supported(Device::cuda, DType::f16, 128));
  CHECK_FALSE(fused_attention_supported(Device::cuda, DType::f32, 64));
  CHECK_FALSE(fused_attention_supported(Device::cuda, DType::bf16, 96));
}

}  // namespace nmt::test
