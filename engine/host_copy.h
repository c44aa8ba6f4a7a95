// Reading device results on the host in fp32 whatever the activation dtype (logits for decoding).
#pragma once

#include <vector>

#include "kernels/tensor.h"

namespace nmt {

// Resizes `out` to src.numel() and fills it with src's elements as float (src: f32, bf16 or f16,
// on either device).
void copy_to_host_f32(const Tensor& src, std::vector<float>& out);

}  // namespace nmt
