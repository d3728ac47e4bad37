// The hierarchical backend: "local first, then across processes, then share" for groups whose
// members are spread over processes, several per process.
//
// make_hierarchical_backend(intra, inter) composes an intra-process backend (every member in this
// process: the in-process one for CPU) with a flat inter-process backend (one member per
// process: MPI, later NCCL). Per call it routes:
//   - a group inside this process to `intra`;
//   - a group with exactly one member in each of its processes to `inter` unchanged;
//   - any other group in stages: the members of each process are combined through `intra` (a
//     local reduction or concatenation), one `inter` call runs over one representative member
//     per process (the first of each process, processes in the order of their first member), and
//     its result is shared by (or sliced for) the local members. Reduce-scatter over a split axis
//     whose chunks are contiguous in memory moves only each process's block; all-to-all packs
//     each process's pieces into one byte tensor per destination after exchanging shapes.
//
// Every process of a group must make the same calls in the same order (SPMD programs do). The
// inter backend checks that processes agree on each call it makes (runtime/collective_agreement.h);
// where that call moves packed bytes (all-gather of interleaved members, all-to-all), the members'
// dtypes and shapes are gathered first and checked here, so a disagreement throws
// CommunicationError naming the collective on every process. Other errors come from the composed
// backends. Thread-safe as far as the composed backends are.
#pragma once

#include <memory>

#include "runtime/collective_backend.h"

namespace dtensor {

// Its name() is "hierarchical(<intra>, <inter>)". Throws InvalidArgumentError for a null backend.
std::shared_ptr<CollectiveBackend> make_hierarchical_backend(
    std::shared_ptr<CollectiveBackend> intra, std::shared_ptr<CollectiveBackend> inter);

}  // namespace dtensor
