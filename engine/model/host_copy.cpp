// Device-to-host reads (through a raw 16-bit staging copy, converted on the host) and id uploads.
#include "engine/model/host_copy.h"

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

void upload_i32(const std::vector<int32_t>& host, const Buffer& dst) {
  Tensor src(const_cast<int32_t*>(host.data()), DType::i32, Device::cpu,
             {static_cast<int64_t>(host.size())});
  Tensor out = dst.view({static_cast<int64_t>(host.size())});
  copy_tensor(src, out);
}

}  // namespace nmt
