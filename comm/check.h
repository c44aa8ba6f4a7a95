// Error checks for MPI and NCCL calls (MPI_CHECK, NCCL_CHECK) and CommError, the exception every
// communication failure is reported with. CUDA_CHECK comes from kernels/cuda/check.h.
#pragma once

#include <mpi.h>
#include <nccl.h>

#include <stdexcept>
#include <string>

namespace nmt {

// A failed or timed-out collective, a bad buffer for a backend, or a failed bootstrap. After one
// from a collective the communicator is unusable: take the job down with Communicator::abort().
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace comm_detail {

void check_mpi(int status, const char* call, const char* file, int line);
// Returns ncclSuccess or ncclInProgress (a non-blocking communicator still working); throws on
// anything else.
ncclResult_t check_nccl(ncclResult_t status, const char* call, const char* file, int line);

}  // namespace comm_detail
}  // namespace nmt

// Throws nmt::CommError naming the MPI error, the call, the file and the line. MPI calls on the
// communicators of comm/ return errors (MPI_ERRORS_RETURN) instead of aborting, so this sees them.
#define MPI_CHECK(call) ::nmt::comm_detail::check_mpi((call), #call, __FILE__, __LINE__)
// Throws nmt::CommError naming the NCCL error, its last-error text, the call, file and line.
#define NCCL_CHECK(call) ::nmt::comm_detail::check_nccl((call), #call, __FILE__, __LINE__)
