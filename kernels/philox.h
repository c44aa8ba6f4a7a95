// Counter-based random numbers (Philox-4x32-10) keyed by (seed, step, tensor id, element), shared
// by the CPU and CUDA backends so both draw the same dropout masks, and a resumed run draws what an
// uninterrupted run would have drawn.
#pragma once

#include <cstdint>

#include "kernels/host_device.h"

namespace nmt {

// Identifies one random stream: a training seed, the optimizer step, and the graph site (each
// dropout in the model has its own tensor id).
// step_on_device: where a GPU kernel reads the step instead of `step`, when set: a training step
// captured into a CUDA graph replays at later steps, and its frozen launch arguments cannot carry
// the step (the model writes it there before each step; engine/model/train_graphs.h). CPU code
// reads `step` only; the model keeps both equal.
struct RngKey {
  uint64_t seed = 0;
  uint64_t step = 0;
  uint32_t tensor_id = 0;
  const uint64_t* step_on_device = nullptr;
};

struct Philox4 {
  uint32_t v[4];
};

NMT_HOST_DEVICE uint32_t philox_mulhi(uint32_t a, uint32_t b, uint32_t* lo) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  *lo = static_cast<uint32_t>(p);
  return static_cast<uint32_t>(p >> 32);
}

// Philox-4x32 with 10 rounds (Salmon et al., SC'11): counter c, key k.
NMT_HOST_DEVICE Philox4 philox4x32(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                   uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    uint32_t lo0, lo1;
    uint32_t hi0 = philox_mulhi(0xD2511F53u, c0, &lo0);
    uint32_t hi1 = philox_mulhi(0xCD9E8D57u, c2, &lo1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// The step a stream is keyed by: on the GPU the one in device memory when the key names it.
NMT_HOST_DEVICE uint64_t rng_step(const RngKey& key) {
#ifdef __CUDA_ARCH__
  if (key.step_on_device != nullptr) return *key.step_on_device;
#endif
  return key.step;
}

// The same key with its step read once (from device memory where it names it): a kernel that
// draws for many items takes this at its start, so that no draw waits on that load again.
NMT_HOST_DEVICE RngKey with_step_read(const RngKey& key) {
  return RngKey{key.seed, rng_step(key), key.tensor_id, nullptr};
}

// The draw of block `block` of a stream: rng_uniform's elements 4 * block .. 4 * block + 3, or
// dropout_uniform's 8 * block .. 8 * block + 7 (every CPU and GPU dropout draws through this call,
// so their masks agree bit for bit).
NMT_HOST_DEVICE Philox4 philox_block(const RngKey& key, uint64_t block) {
  const uint64_t step = rng_step(key);
  return philox4x32(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                    key.tensor_id ^ static_cast<uint32_t>(step >> 32) * 0x9E3779B9u,
                    static_cast<uint32_t>(step), static_cast<uint32_t>(key.seed),
                    static_cast<uint32_t>(key.seed >> 32));
}

// A Philox word's top 24 bits as a uniform float in [0, 1).
NMT_HOST_DEVICE float uniform_of_word(uint32_t word) {
  return static_cast<float>(word >> 8) * (1.0f / 16777216.0f);
}
// Uniform float in [0, 1) for one element of a stream (initialisation, synthetic data; dropout
// draws dropout_uniform, below). Four consecutive elements share one Philox call (counter =
// element / 4), so a vectorised kernel can draw four at a time.
NMT_HOST_DEVICE float rng_uniform(const RngKey& key, uint64_t element) {
  return uniform_of_word(philox_block(key, element >> 2).v[element & 3]);
}
// rng_uniform of elements 4 * block .. 4 * block + 3, from one Philox call.
NMT_HOST_DEVICE void rng_block_uniforms(const RngKey& key, uint64_t block, float (&u)[4]) {
  const Philox4 r = philox_block(key, block);
  for (int j = 0; j < 4; ++j) u[j] = uniform_of_word(r.v[j]);
}

// Dropout draws its own uniforms, 16 bits each, eight elements per Philox call: element e is half
// e % 2 (the low 16 bits first) of word (e / 2) % 4 of block e / 8. That is half the Philox work
// of one 24-bit uniform per word (rng_uniform), which bounds the dropout kernels on the GPU, and
// resolves p to 1/65536 (a keep test `u >= p` of multiples of 2^-16, exact in float).
constexpr int kDropoutBlockElements = 8;

// The uniform of half `half` (0: low, 1: high) of a Philox word.
NMT_HOST_DEVICE float dropout_half_uniform(uint32_t word, int half) {
  const uint32_t bits = half != 0 ? word >> 16 : word & 0xFFFFu;
  return static_cast<float>(bits) * (1.0f / 65536.0f);
}

// The uniform of element e of a stream's dropout.
NMT_HOST_DEVICE float dropout_uniform(const RngKey& key, uint64_t element) {
  const Philox4 r = philox_block(key, element >> 3);
  const int word = static_cast<int>(element >> 1) & 3;
  return dropout_half_uniform(r.v[word], static_cast<int>(element & 1));
}

// Dropout keeps an element with probability 1 - p.
NMT_HOST_DEVICE bool dropout_keep(const RngKey& key, uint64_t element, float p) {
  return dropout_uniform(key, element) >= p;
}

// A dropout's keep mask saved as bits, for a backward to read instead of drawing it again (the
// LayerNorm tails of kernels/layernorm.h and dropout_backward_bias): element e of the flat
// [rows, d] tensor (e = row * d + col) is bit e % 32 of i32 word e / 32, 1 where dropout_keep.
// In memory (little-endian, as the GPU and the x86 / Arm hosts are) that is bit e % 8 of byte
// e / 8: one byte per 8-element pack from a multiple of 8, the byte dropout_keep_bits<8> makes of
// the pack (kernels/cuda/dropout_mask.cuh). The words of a [rows, d] mask:
NMT_HOST_DEVICE int64_t dropout_keep_bits_words(int64_t rows, int64_t d) {
  return (rows * d + 31) / 32;
}

}  // namespace nmt
