// Rank bootstrap from MPI, GPU selection by local rank, job abort; also the MPI/NCCL check helpers.
#include "comm/bootstrap.h"

#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "comm/check.h"

namespace nmt {
namespace comm_detail {

void check_mpi(int status, const char* call, const char* file, int line) {
  if (status == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(status, text, &length);
  throw CommError(std::string("MPI error: ") + text + " in " + call + " at " + file + ":" +
                  std::to_string(line));
}

ncclResult_t check_nccl(ncclResult_t status, const char* call, const char* file, int line) {
  if (status == ncclSuccess || status == ncclInProgress) return status;
  const char* detail = ncclGetLastError(nullptr);
  throw CommError(std::string("NCCL error: ") + ncclGetErrorString(status) +
                  (detail && *detail ? std::string(" (") + detail + ")" : std::string()) + " in " +
                  call + " at " + file + ":" + std::to_string(line));
}

}  // namespace comm_detail

namespace {
bool g_initialised_mpi = false;  // true when init_ranks (not the caller) started MPI
}

RankInfo init_ranks(int* argc, char*** argv) {
  int initialised = 0;
  MPI_CHECK(MPI_Initialized(&initialised));
  if (!initialised) {
    int provided = 0;
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    g_initialised_mpi = true;
  }
  RankInfo ranks;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &ranks.world_rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &ranks.world_size));
  // The processes that share memory with this one are the ones on this node.
  MPI_Comm node = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, ranks.world_rank,
                                MPI_INFO_NULL, &node));
  MPI_CHECK(MPI_Comm_rank(node, &ranks.local_rank));
  MPI_CHECK(MPI_Comm_size(node, &ranks.local_size));
  MPI_CHECK(MPI_Comm_free(&node));
  return ranks;
}

void finalize_ranks() {
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (g_initialised_mpi && !finalised) MPI_Finalize();
}

int select_gpu(const RankInfo& ranks) {
  int devices = 0;
  cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    throw CommError("rank " + std::to_string(ranks.world_rank) + ": no CUDA device (" +
                    (status != cudaSuccess ? cudaGetErrorString(status) : "0 devices") + ")");
  }
  if (ranks.local_rank >= devices) {
    throw CommError("rank " + std::to_string(ranks.world_rank) + ": local rank " +
                    std::to_string(ranks.local_rank) + " needs GPU " +
                    std::to_string(ranks.local_rank) + " but this node has " +
                    std::to_string(devices) + " (start at most one rank per GPU)");
  }
  status = cudaSetDevice(ranks.local_rank);
  if (status != cudaSuccess) {
    throw CommError("rank " + std::to_string(ranks.world_rank) + ": cudaSetDevice(" +
                    std::to_string(ranks.local_rank) + ") failed: " + cudaGetErrorString(status));
  }
  return ranks.local_rank;
}

void abort_job(const RankInfo& ranks, const std::string& reason) {
  // Communication errors already begin with "rank R: "; don't say it twice.
  const std::string prefix = "rank " + std::to_string(ranks.world_rank) + ": ";
  const bool named = reason.compare(0, prefix.size(), prefix) == 0;
  std::fprintf(stderr, "%s%s\n", named ? "" : prefix.c_str(), reason.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (initialised && !finalised) MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

}  // namespace nmt
