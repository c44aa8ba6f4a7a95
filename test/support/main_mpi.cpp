// Test main for MPI suites (run by ctest under mpiexec -n 2): MPI is up for the whole session.
#include <mpi.h>

#include "test/support/catch_session.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int result = Catch::Session().run(argc, argv);
  int worst = 0;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
