// How dtensor's dtypes and reductions map onto MPI: element counts as MPI's int, the MPI datatype
// of a dtype, and the reduction op, with user-defined ops where MPI's own would be wrong: bf16
// (no MPI type) folds in f32, and max/min of floats propagate NaN (MPI_MAX and MPI_MIN leave NaN
// to the implementation, so a NaN on another process could vanish).
//
// MpiOps owns the user-defined ops it creates (freed by its destructor unless MPI is finalized).
// Not thread-safe: the MPI backend calls it under its lock (runtime/mpi/mpi_session.h).
#pragma once

#include <mpi.h>

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/reduce_op.h"

namespace dtensor {

// `n` as the int count of one MPI call; throws CommunicationError naming `function` past INT_MAX.
int mpi_count(int64_t n, const char* function);

// The MPI datatype of `dtype` (bf16 travels as 16-bit words, reduced by MpiOps's ops).
MPI_Datatype mpi_type(DType dtype);

class MpiOps {
 public:
  MpiOps() = default;
  ~MpiOps();
  MpiOps(const MpiOps&) = delete;
  MpiOps& operator=(const MpiOps&) = delete;

  // The op that reduces `dtype` with `op`, created on first use.
  MPI_Op get(ReduceOp op, DType dtype);

 private:
  MPI_Op bf16_[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  // NaN-propagating max and min: f32 max, f32 min, f64 max, f64 min.
  MPI_Op float_[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
};

}  // namespace dtensor
