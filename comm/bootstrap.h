// Rank bootstrap: who this process is in the job (world and node-local rank and size) from MPI,
// the GPU a rank drives, and taking the whole job down with a message.
#pragma once

#include <string>

namespace nmt {

struct RankInfo {
  int world_rank = 0;
  int world_size = 1;
  int local_rank = 0;  // rank among the processes of this node (MPI_COMM_TYPE_SHARED)
  int local_size = 1;
};

// Initialises MPI (MPI_Init_thread, MPI_THREAD_FUNNELED: only the main thread calls MPI) unless it
// is already up, and returns this process's ranks. Without mpirun this is an MPI singleton: rank 0
// of 1. argc/argv may be null.
RankInfo init_ranks(int* argc = nullptr, char*** argv = nullptr);

// MPI_Finalize if init_ranks initialised MPI and nobody finalised it yet. Call it only on the
// normal exit path: after a communication failure finalising can hang; call abort_job instead.
void finalize_ranks();

// Makes GPU `local_rank` current for this thread (cudaSetDevice) and returns its index. Throws
// CommError naming the rank when the node has fewer GPUs than ranks.
int select_gpu(const RankInfo& ranks);

// Prints "rank R: <reason>" (once, if reason already starts with it) to stderr and ends every rank
// of the job (MPI_Abort) with a non-zero exit code; without MPI, exits this process with status 1.
[[noreturn]] void abort_job(const RankInfo& ranks, const std::string& reason);

}  // namespace nmt
