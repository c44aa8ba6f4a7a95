// Arena: planned bump allocation on the CPU (aligned heap) or the GPU (one cudaMalloc).
#include "engine/model/arena.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace nmt {

static constexpr size_t kAlign = 256;

Tensor Buffer::view(std::initializer_list<int64_t> dims) const {
  Tensor t(data, dtype, device, dims);
  if (t.numel() > capacity)
    throw std::logic_error("buffer '" + name + "' holds " + std::to_string(capacity) +
                           " elements, asked for " + t.shape_string());
  return t;
}

Arena Arena::planner(Device device) {
  Arena a;
  a.device_ = device;
  return a;
}

Arena::Arena(Device device, size_t bytes) : device_(device), capacity_(bytes) {
  if (bytes == 0) bytes = kAlign;
  if (device == Device::cpu) {
    base_ = static_cast<char*>(std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign));
    if (!base_) throw std::runtime_error("arena: cannot allocate " + std::to_string(bytes) + " bytes");
    std::memset(base_, 0, bytes);
  } else {
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err != cudaSuccess)
      throw std::runtime_error("arena: cudaMalloc of " + std::to_string(bytes) +
                               " bytes failed: " + cudaGetErrorString(err));
    cudaMemset(p, 0, bytes);
    base_ = static_cast<char*>(p);
  }
}

Arena::~Arena() { release(); }

Arena::Arena(Arena&& other) noexcept { *this = std::move(other); }

Arena& Arena::operator=(Arena&& other) noexcept {
  if (this != &other) {
    release();
    device_ = other.device_;
    base_ = std::exchange(other.base_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    used_ = std::exchange(other.used_, 0);
  }
  return *this;
}

void Arena::release() {
  if (!base_) return;
  if (device_ == Device::cpu)
    std::free(base_);
  else
    cudaFree(base_);
  base_ = nullptr;
}

Buffer Arena::allocate(const std::string& name, DType dtype, int64_t elements) {
  size_t bytes = static_cast<size_t>(elements) * dtype_size(dtype);
  size_t offset = (used_ + kAlign - 1) / kAlign * kAlign;
  if (!planning() && offset + bytes > capacity_)
    throw std::logic_error("arena full: '" + name + "' needs " + std::to_string(bytes) +
                           " bytes, " + std::to_string(capacity_ - std::min(offset, capacity_)) +
                           " left (the plan and the allocation disagree)");
  used_ = offset + bytes;
  Buffer b;
  b.data = planning() ? nullptr : base_ + offset;
  b.capacity = elements;
  b.dtype = dtype;
  b.device = device_;
  b.name = name;
  return b;
}

}  // namespace nmt
