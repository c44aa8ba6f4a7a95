// Device-to-host reads through a raw 16-bit staging copy, converted on the host.
#include "engine/host_copy.h"

#include <cstdint>

#include "kernels/elementwise.h"

namespace nmt {

void copy_to_host_f32(const Tensor& src, std::vector<float>& out) {
  out.resize(static_cast<size_t>(src.numel()));
  Tensor host = src;
  host.device = Device::cpu;
  host.dtype = DType::f32;
  host.data = out.data();
  if (src.dtype == DType::f32) return copy_tensor(src, host);
  std::vector<uint16_t> raw(out.size());
  Tensor staged = src;
  staged.device = Device::cpu;
  staged.data = raw.data();
  copy_tensor(src, staged);
  convert_tensor(staged, host);
}

}  // namespace nmt
