// Helpers for the kernel tests: CPU tensor views over std::vectors, exception-message checks, and
// dropout(relu(z)) through the separate forward ops (the y the fused backward tails read).
#pragma once

#include <bit>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/elementwise.h"
#include "kernels/philox.h"
#include "kernels/tensor.h"

namespace nmt::test {

// The bits of each value, so that a comparison tells -0 from +0 (and shows the values it differs
// in).
inline std::vector<uint32_t> bits(const std::vector<float>& values) {
  std::vector<uint32_t> out;
  out.reserve(values.size());
  for (float v : values) out.push_back(std::bit_cast<uint32_t>(v));
  return out;
}

// Whether an error message names `what`.
inline bool message_has(const std::string& message, const char* what) {
  return message.find(what) != std::string::npos;
}

// A view of `values` with the given shape; throws if the element counts differ.
inline Tensor view(const std::vector<float>& values, std::initializer_list<int64_t> dims) {
  Tensor t(const_cast<float*>(values.data()), DType::f32, Device::cpu, dims);
  if (static_cast<size_t>(t.numel()) != values.size())
    throw std::invalid_argument("view: " + t.shape_string() + " over " +
                                std::to_string(values.size()) + " floats");
  return t;
}

inline Tensor view(const std::vector<int32_t>& values, std::initializer_list<int64_t> dims) {
  Tensor t(const_cast<int32_t*>(values.data()), DType::i32, Device::cpu, dims);
  if (static_cast<size_t>(t.numel()) != values.size())
    throw std::invalid_argument("view: " + t.shape_string() + " over " +
                                std::to_string(values.size()) + " ints");
  return t;
}

// The message of the std::invalid_argument `call` throws, or "" when it throws nothing.
template <typename Call>
std::string invalid_argument_message(Call&& call) {
  try {
    call();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// dropout(relu(z)) forward through the separate ops, on the CPU.
inline std::vector<float> relu_then_dropout(std::vector<float> z, float p, const RngKey& key) {
  const auto n = static_cast<int64_t>(z.size());
  Tensor z_view = view(z, {n});
  relu_forward(z_view, z_view);
  dropout_forward(z_view, z_view, p, key);
  return z;
}

}  // namespace nmt::test
