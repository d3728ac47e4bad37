#!/usr/bin/env bash
# Runs a program under mpirun on this machine, for bazel test targets (see tests/mpi.bzl):
#   mpirun_test.sh <processes> <program> [args...]
# Ranks may outnumber cores (--oversubscribe) and run as root (containers). A hung job is killed
# after DTENSOR_MPI_TIMEOUT seconds (default 240) so a deadlock fails the test instead of
# stalling the suite.
set -euo pipefail
processes=$1
program=$2
shift 2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Shared memory between ranks without ptrace-based single copy (not allowed in containers).
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
# Session files and shared-memory segments in this test's own directory: sandboxed tests run in
# PID namespaces, so concurrent jobs could otherwise pick the same names in /tmp and /dev/shm.
if [[ -n "${TEST_TMPDIR:-}" ]]; then
  export TMPDIR=$TEST_TMPDIR OMPI_MCA_orte_tmpdir_base=$TEST_TMPDIR \
    OMPI_MCA_btl_vader_backing_directory=$TEST_TMPDIR OMPI_MCA_osc_sm_backing_directory=$TEST_TMPDIR
fi
# Under AddressSanitizer: Open MPI keeps allocations until exit in code LeakSanitizer cannot
# attribute (components unloaded at finalize, frames without frame pointers), so leak checking
# is off here; the same code runs with it on in the one-process tests. Other ASan checks stay on.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
exec timeout --kill-after=10 "${DTENSOR_MPI_TIMEOUT:-240}" \
  mpirun --oversubscribe --bind-to none -np "$processes" "$program" "$@"
