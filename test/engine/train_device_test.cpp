// train.device auto: resolved against the machine (cuda with a GPU, else cpu, said at start-up),
// an explicit cuda without a GPU stopped with one message naming the CPU config and override, and
// bf16/fp16 falling back to fp32 on the CPU. The resolution is tested as a pure function for both
// kinds of machine; the program on the machine the test runs on.
#include "engine/train/train_device.h"

#include <string>

#include "engine/config/config.h"
#include "engine/model/cuda_device_check.h"
#include "test/engine/train_program.h"
#include "test/support/catch.h"
#include "test/support/lib/scratch_dir.h"
#include "test/support/tiny_run_config.h"

namespace {

using nmt::Device;
using nmt::DType;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

nmt::RunConfig gpu_style_config() {  // as configs/bible-en-es.json: auto, bf16
  nmt::RunConfig c = nmt::test::tiny_reverse_config();
  c.train.device.reset();
  c.train.precision = DType::bf16;
  c.dist.allreduce_dtype = DType::bf16;
  return c;
}

}  // namespace

TEST_CASE("train.device auto: cuda with a GPU, precision kept", "[engine][device]") {
  nmt::ResolvedDevice r = nmt::resolve_train_device(gpu_style_config(), 2, "");
  CHECK(r.cfg.train.device == Device::cuda);
  CHECK(r.cfg.train.precision == DType::bf16);
  CHECK(r.cfg.dist.allreduce_dtype == DType::bf16);
  REQUIRE(r.lines.size() == 1);
  CHECK(r.lines[0] == "device: cuda (train.device auto: 2 GPUs visible)");
}

TEST_CASE("train.device auto without a GPU: cpu, bf16 falls back to fp32 with a note",
          "[engine][device]") {
  nmt::ResolvedDevice r =
      nmt::resolve_train_device(gpu_style_config(), 0, "no CUDA-capable device is detected");
  CHECK(r.cfg.train.device == Device::cpu);
  CHECK(r.cfg.train.precision == DType::f32);
  CHECK(r.cfg.dist.allreduce_dtype == DType::f32);
  REQUIRE(r.lines.size() == 3);
  CHECK(contains(r.lines[0], "device: cpu (train.device auto: no GPU visible: no CUDA-capable"));
  CHECK(contains(r.lines[0], "configs/bible-en-es-cpu.json"));
  CHECK(r.lines[1] == "note: train.precision bf16 -> fp32: the cpu device computes in fp32");
  CHECK(r.lines[2] ==
        "note: dist.allreduce_dtype bf16 -> fp32: the cpu device all-reduces in fp32");
  CHECK_NOTHROW(nmt::validate_run_config(r.cfg));
}

TEST_CASE("train.device cuda without a GPU: one message naming the CPU config and override",
          "[engine][device]") {
  nmt::RunConfig c = gpu_style_config();
  c.train.device = Device::cuda;
  std::string message;
  try {
    nmt::resolve_train_device(c, 0, "0 devices");
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(contains(message, "train.device = cuda: no GPU was found (0 devices)"));
  CHECK(contains(message, "--set train.device=cpu"));
  CHECK(contains(message, "configs/bible-en-es-cpu.json"));
  CHECK(nmt::resolve_train_device(c, 1, "").lines.at(0) == "device: cuda (1 GPU visible)");
}

TEST_CASE("train.device cpu: explicit, fp32 kept, bf16 falls back", "[engine][device]") {
  nmt::RunConfig c = nmt::test::tiny_reverse_config();
  nmt::ResolvedDevice r = nmt::resolve_train_device(c, 4, "");
  CHECK(r.cfg.train.device == Device::cpu);
  CHECK(r.lines == std::vector<std::string>{"device: cpu"});
  c.train.precision = DType::f16;
  r = nmt::resolve_train_device(c, 4, "");
  CHECK(r.cfg.train.precision == DType::f32);
  CHECK(r.lines.size() == 2);
}

#ifdef NMT_TRAIN_BINARY
TEST_CASE("nmt-train on this machine: auto says which device; cuda without a GPU exits 1",
          "[engine][device][program]") {
  nmt::test::ScratchDir dir("nmt-train-device");
  nmt::RunConfig c = gpu_style_config();
  c.train.max_steps = 2;
  c.eval.every_steps = 0;
  const std::string config = nmt::test::write_config(dir.path() + "/auto.json", c);
  nmt::test::ProgramResult run = nmt::test::run_program({"--config", config});
  INFO(run.output);
  CHECK(run.exit_code == 0);
  if (nmt::visible_cuda_devices() > 0) {
    CHECK(contains(run.output, "device: cuda (train.device auto: "));
    WARN("a GPU is visible: the no-GPU error of train.device=cuda is tested as a unit only");
    return;
  }
  CHECK(contains(run.output, "device: cpu (train.device auto: no GPU visible"));
  CHECK(contains(run.output, "note: train.precision bf16 -> fp32"));
  CHECK(contains(run.output, "done: 2 steps"));

  nmt::test::ProgramResult cuda =
      nmt::test::run_program({"--config", config, "--set", "train.device=cuda"});
  INFO(cuda.output);
  CHECK(cuda.exit_code == 1);
  CHECK(contains(cuda.output, "nmt-train: error: train.device = cuda: no GPU was found"));
  CHECK(contains(cuda.output, "configs/bible-en-es-cpu.json"));
}
#endif
