#include "runtime/mpi/mpi_types.h"

#include <climits>

#include "runtime/error.h"
#include "runtime/mpi/mpi_check.h"

namespace dtensor {
namespace {

template <ReduceOp kOp>
void reduce_bf16(void* in, void* inout, int* length, MPI_Datatype*) {
  const auto* a = static_cast<const BFloat16*>(in);
  auto* b = static_cast<BFloat16*>(inout);
  for (int i = 0; i < *length; ++i) {
    const float x = static_cast<float>(a[i]);
    const float y = static_cast<float>(b[i]);
    float r = x + y;
    if constexpr (kOp == ReduceOp::kMax) r = max_propagating_nan(x, y);
    if constexpr (kOp == ReduceOp::kMin) r = min_propagating_nan(x, y);
    b[i] = BFloat16(r);
  }
}

template <typename T, ReduceOp kOp>
void reduce_float_extremum(void* in, void* inout, int* length, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *length; ++i) {
    b[i] =
        kOp == ReduceOp::kMax ? max_propagating_nan(a[i], b[i]) : min_propagating_nan(a[i], b[i]);
  }
}

MPI_Op& created(MPI_Op& slot, MPI_User_function* fn) {
  if (slot == MPI_OP_NULL) {
    check_mpi(MPI_Op_create(fn, /*commute=*/1, &slot), "all_reduce", "MPI_Op_create");
  }
  return slot;
}

}  // namespace

int mpi_count(int64_t n, const char* function) {
  if (n > INT_MAX) {
    throw_error<CommunicationError>(function,
                                    "{} elements exceed the int count of one MPI call; split the "
                                    "tensor",
                                    n);
  }
  return static_cast<int>(n);
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kF64:
      return MPI_DOUBLE;
    case DType::kBF16:
      return MPI_UINT16_T;  // reduced by MpiOps's bf16 ops
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI64:
      return MPI_INT64_T;
    case DType::kBool:
      return MPI_C_BOOL;
  }
  return MPI_BYTE;
}

MpiOps::~MpiOps() {
  int finalized = 1;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (MPI_Op& op : bf16_) {
    if (op != MPI_OP_NULL) MPI_Op_free(&op);
  }
  for (MPI_Op& op : float_) {
    if (op != MPI_OP_NULL) MPI_Op_free(&op);
  }
}

MPI_Op MpiOps::get(ReduceOp op, DType dtype) {
  if (dtype == DType::kBool) return op == ReduceOp::kMin ? MPI_LAND : MPI_LOR;
  if (dtype == DType::kBF16) {
    MPI_User_function* fn = op == ReduceOp::kSum   ? &reduce_bf16<ReduceOp::kSum>
                            : op == ReduceOp::kMax ? &reduce_bf16<ReduceOp::kMax>
                                                   : &reduce_bf16<ReduceOp::kMin>;
    return created(bf16_[static_cast<size_t>(op)], fn);
  }
  if ((dtype == DType::kF32 || dtype == DType::kF64) && op != ReduceOp::kSum) {
    const bool f64 = dtype == DType::kF64, max = op == ReduceOp::kMax;
    MPI_User_function* fn = f64 ? (max ? &reduce_float_extremum<double, ReduceOp::kMax>
                                       : &reduce_float_extremum<double, ReduceOp::kMin>)
                                : (max ? &reduce_float_extremum<float, ReduceOp::kMax>
                                       : &reduce_float_extremum<float, ReduceOp::kMin>);
    return created(float_[(f64 ? 2 : 0) + (max ? 0 : 1)], fn);
  }
  switch (op) {
    case ReduceOp::kSum:
      return MPI_SUM;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kMin:
      return MPI_MIN;
  }
  return MPI_SUM;
}

}  // namespace dtensor
