// Host <-> device copies of the engine: device results read on the host in fp32 whatever the
// activation dtype (logits for decoding), and host ids uploaded into i32 buffers.
#pragma once

#include <vector>

#include "engine/model/arena.h"
#include "kernels/tensor.h"

namespace nmt {

// Resizes `out` to src.numel() and fills it with src's elements as float (src: f32, bf16 or f16,
// on either device).
void copy_to_host_f32(const Tensor& src, std::vector<float>& out);

// Copies host ids (or lengths) into the first host.size() elements of an i32 buffer on either
// device.
void upload_i32(const std::vector<int32_t>& host /* [n] */, const Buffer& dst);

}  // namespace nmt
