// Data-parallel training on two GPUs under mpiexec -n 2 (NCCL; skipped where a node has fewer
// GPUs than ranks): with the exchange overlapping backward, in fp32 and bf16 on the wire, every
// rank ends with bit-identical parameters; in fp32 they equal one process over the union of the
// ranks' batches within rounding.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "engine/config/config.h"
#include "engine/train/trainer.h"
#include "test/engine_mpi/rank_compare.h"
#include "test/support/catch.h"

namespace {

nmt::RunConfig gpu_config(nmt::DType precision, nmt::DType wire) {
  nmt::RunConfig c;
  c.data.train = "synthetic:reverse";
  c.data.synthetic_train_pairs = 4000;
  c.data.synthetic_dev_pairs = 40;
  c.data.synthetic_max_len = 12;
  c.model.encoder_layers = c.model.decoder_layers = 2;
  c.model.d_model = 128;  // head_dim 64: the fused attention kernel in bf16
  c.model.num_heads = 2;
  c.model.ffn_dim = 256;
  // Off for the comparison with one process (dropout masks are keyed per rank).
  c.model.dropout = c.model.attention_dropout = c.model.relu_dropout = 0.0;
  c.train.device = nmt::Device::cuda;
  c.train.precision = precision;
  c.train.batch_tokens = 1024;
  c.train.max_steps = 20;
  c.train.clip_norm = 1.0;
  c.optimizer.epsilon = 1.0;  // updates proportional to the gradient (see data_parallel_test.cpp)
  c.lr_schedule.policy = nmt::LrPolicy::constant;
  c.lr_schedule.learning_rate = 0.5;
  c.log.every_steps = 5;
  c.dist.bucket_mb = 0.25;  // several buckets, so some start during backward
  c.dist.checksum_every = 5;
  c.dist.allreduce_dtype = wire;
  return c;
}

}  // namespace

TEST_CASE("two GPUs train to bit-identical parameters with the overlapped exchange",
          "[mpi][cuda][engine]") {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  REQUIRE(size == 2);
  for (auto [precision, wire] :
       {std::pair{nmt::DType::f32, nmt::DType::f32}, std::pair{nmt::DType::bf16, nmt::DType::f32},
        std::pair{nmt::DType::bf16, nmt::DType::bf16}}) {
    INFO("precision " << nmt::dtype_name(precision) << ", all-reduce in " << nmt::dtype_name(wire));
    std::vector<float> distributed;
    std::ostringstream log;
    nmt::TrainOptions dp;
    dp.final_parameters = &distributed;
    nmt::TrainSummary s = nmt::run_training(gpu_config(precision, wire), log, dp);
    CHECK(s.steps == 20);
    CHECK(std::isfinite(s.last_loss));
    CHECK(nmt::test::identical_on_every_rank(distributed));
    if (precision != nmt::DType::f32) continue;

    std::vector<float> single;
    std::ostringstream log_single;
    nmt::TrainOptions alone;
    alone.distributed = false;
    alone.final_parameters = &single;
    nmt::run_training(gpu_config(precision, wire), log_single, alone);
    REQUIRE(single.size() == distributed.size());
    nmt::test::ScaledDifference d = nmt::test::scaled_difference(single, distributed);
    INFO("single vs data-parallel parameters: max difference " << d.max_difference << " at scale "
                                                               << d.scale);
    CHECK(d.relative() < 1e-4);
  }
}
