// Beam search on the GPU: the trained reversal model decodes the same tokens (and scores within
// float tolerance) on CUDA as on the CPU, beam 1 matches greedy_decode on CUDA, and translate_lines
// runs end to end with --device cuda.
#include <memory>
#include <vector>

#include "engine/checkpoint.h"
#include "engine/decode.h"
#include "engine/decode_translate.h"
#include "engine/synthetic_reverse.h"
#include "engine/trainer.h"
#include "test/decode/decode_test_util.h"
#include "test/support/catch.h"

namespace {

const nmt::SyntheticReverse& reverse_data() {
  static const nmt::RunConfig cfg = nmt::test::reverse_config();
  static const nmt::SyntheticReverse data(cfg.data, static_cast<uint64_t>(cfg.train.seed),
                                          cfg.train.batch_tokens, 0);
  return data;
}

std::unique_ptr<nmt::Transformer> trained_model(nmt::Device device) {
  nmt::RunConfig cfg = nmt::test::reverse_config();
  auto model = std::make_unique<nmt::Transformer>(
      nmt::model_shape_from(cfg.model, reverse_data().vocab()), device, 1024, 32);
  nmt::load_model_weights(nmt::test::trained_reverse_checkpoint(), model->params());
  return model;
}

}  // namespace

TEST_CASE("beam search on CUDA decodes what the CPU decodes", "[decode][cuda]") {
  int64_t beam = GENERATE(1, 4);
  INFO("beam " << beam);
  auto cpu = trained_model(nmt::Device::cpu);
  auto gpu = trained_model(nmt::Device::cuda);
  nmt::BeamOptions o;
  o.beam = beam;
  const auto& sources = reverse_data().dev_sources();
  auto on_cpu = nmt::BeamSearch(*cpu, o).search(sources);
  auto on_gpu = nmt::BeamSearch(*gpu, o).search(sources);
  REQUIRE(on_gpu.size() == on_cpu.size());
  for (size_t i = 0; i < on_cpu.size(); ++i) {
    REQUIRE(!on_gpu[i].empty());
    CHECK(on_gpu[i].front().tokens == on_cpu[i].front().tokens);
    CHECK(on_gpu[i].front().score == Approx(on_cpu[i].front().score).margin(1e-4));
  }
}

TEST_CASE("beam 1 on CUDA matches greedy_decode on CUDA", "[decode][cuda]") {
  auto gpu = trained_model(nmt::Device::cuda);
  nmt::BeamOptions o;
  o.beam = 1;
  o.max_len_a = 0;
  o.max_len_b = 14;
  nmt::BeamSearch search(*gpu, o);
  for (const nmt::Batch& batch : reverse_data().dev_batches(16)) {
    auto greedy = gpu->greedy_decode(batch, o.max_len_b);
    auto found = search.search(batch);
    REQUIRE(found.size() == greedy.size());
    for (size_t i = 0; i < greedy.size(); ++i) CHECK(found[i].front().tokens == greedy[i]);
  }
}

TEST_CASE("translate_lines with --device cuda gives the CPU's lines", "[decode][cuda]") {
  const nmt::test::ReverseText& text = nmt::test::reverse_text();
  nmt::TranslateOptions o;
  o.checkpoint = nmt::test::trained_reverse_checkpoint();
  o.vocab = text.vocab;
  o.device = nmt::Device::cpu;
  std::vector<std::string> on_cpu = nmt::translate_lines(o, text.sources);
  o.device = nmt::Device::cuda;
  CHECK(nmt::translate_lines(o, text.sources) == on_cpu);
  CHECK(nmt::default_decode_device() == nmt::Device::cuda);  // this suite runs only with a GPU
}
