// Test main for the MPI + NCCL suite: MPI up for the whole session, and exit 77 (ctest "Skipped")
// with a message on every rank when some node has fewer GPUs than ranks.
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>

#include "comm/bootstrap.h"
#include "test/support/catch_session.h"

int main(int argc, char** argv) {
  // MPI is the session's, not init_ranks': code under test that finalizes what it initialised
  // (DataParallel) then leaves it up for the following test cases.
  MPI_Init(&argc, &argv);
  nmt::RankInfo ranks = nmt::init_ranks(&argc, &argv);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  int enough = devices >= ranks.local_size ? 1 : 0, everywhere = 0;
  MPI_Allreduce(&enough, &everywhere, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!everywhere) {
    if (ranks.world_rank == 0) {
      std::printf(
          "SKIPPED: %d ranks per node need as many GPUs, found %d; run on a multi-GPU "
          "machine.\n",
          ranks.local_size, devices);
    }
    MPI_Finalize();
    return 77;
  }
  int result = Catch::Session().run(argc, argv);
  int worst = 0;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
