// Data-parallel training under mpiexec -n 2 (CPU, MPI): after N steps every rank holds
// bit-identical parameters, equal within fp32 tolerance to one process trained on the union of the
// ranks' batches.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "engine/config/config.h"
#include "engine/train/trainer.h"
#include "test/engine_mpi/rank_compare.h"
#include "test/support/catch.h"
#include "test/support/tiny_run_config.h"

namespace {

nmt::RunConfig small_config() {
  nmt::RunConfig c = nmt::test::tiny_reverse_config();
  // Dropout masks are keyed by rank and element position inside each rank's own batch, so with
  // dropout a data-parallel run draws other masks than one process over the union (both are valid
  // draws); the comparison needs it off.
  c.model.dropout = c.model.attention_dropout = c.model.relu_dropout = 0.0;
  c.train.max_steps = 20;
  c.train.clip_norm = 1.0;
  // Adam with a large epsilon updates by ~lr * m (SGD with momentum): proportional to the gradient,
  // so a wrong exchange (a rank missing or counted twice) moves the weights visibly, while
  // rounding differences stay at rounding level. (With a tiny epsilon, Adam's m / sqrt(v) turns
  // rounding-level gradients into full-size steps of either sign.)
  c.optimizer.epsilon = 1.0;
  c.lr_schedule.policy = nmt::LrPolicy::constant;
  c.lr_schedule.learning_rate = 0.5;
  c.log.every_steps = 5;
  c.dist.bucket_mb = 0.05;  // several buckets over the ~40k parameters
  c.dist.checksum_every = 5;
  return c;
}

}  // namespace

TEST_CASE("two ranks train to bit-identical parameters, equal to one process on the union",
          "[mpi][engine]") {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  REQUIRE(size == 2);

  std::vector<float> distributed, single;
  std::ostringstream log_distributed, log_single;
  nmt::TrainOptions dp;
  dp.final_parameters = &distributed;
  nmt::TrainSummary s = nmt::run_training(small_config(), log_distributed, dp);
  CHECK(s.steps == 20);
  if (rank == 0)
    CHECK(log_distributed.str().find("data parallel: 2 ranks over mpi") != std::string::npos);

  CHECK(nmt::test::identical_on_every_rank(distributed));

  // One process over the whole global batch (each rank runs it alone, identically).
  nmt::TrainOptions alone;
  alone.distributed = false;
  alone.final_parameters = &single;
  nmt::run_training(small_config(), log_single, alone);
  REQUIRE(single.size() == distributed.size());
  nmt::test::ScaledDifference d = nmt::test::scaled_difference(single, distributed);
  // The two runs sum each gradient in a different order (two partial sums, then their sum).
  INFO("single vs data-parallel parameters: max difference " << d.max_difference << " at scale "
                                                             << d.scale);
  CHECK(d.relative() < 1e-5);
  if (rank == 0) INFO(log_distributed.str());
}
