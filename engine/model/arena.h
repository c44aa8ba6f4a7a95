// Arena: one allocation per device that every activation, gradient and parameter buffer is carved
// from, planned once before training so that no step allocates. Buffer: a fixed-capacity region of
// the arena that hands out views of any shape up to its capacity (batches vary in shape).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "kernels/tensor.h"

namespace nmt {

struct Buffer {
  void* data = nullptr;
  int64_t capacity = 0;  // elements
  DType dtype = DType::f32;
  Device device = Device::cpu;
  std::string name;

  // A view of the first numel(dims) elements with that shape; throws if over capacity.
  Tensor view(std::initializer_list<int64_t> dims) const;
  Tensor flat() const { return view({capacity}); }
};

class Arena {
 public:
  // A planning arena (data == nullptr) counts bytes; a real one allocates `bytes` on `device`.
  static Arena planner(Device device);
  Arena(Device device, size_t bytes);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  Arena(Arena&& other) noexcept;
  Arena& operator=(Arena&& other) noexcept;

  // Carves `elements` of `dtype`, 256-byte aligned. Throws if the arena is full.
  Buffer allocate(const std::string& name, DType dtype, int64_t elements);

  Device device() const { return device_; }
  size_t used() const { return used_; }
  size_t capacity() const { return capacity_; }
  bool planning() const { return base_ == nullptr; }

 private:
  Arena() = default;
  void release();

  Device device_ = Device::cpu;
  char* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
};

}  // namespace nmt
