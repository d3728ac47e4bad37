// Printing tensors, DTensors, meshes and layouts: `std::cout << x` and `fmt::print("{}", x)`.
//
//   Tensor   Tensor(f32[2,3], [[0, 1.5, 2],
//                              [3, 4, 5]])
//            numpy-style nested brackets; past 1000 elements each dim longer than 6 shows its
//            first and last 3 entries around "...". bf16 prints as float, bool as true/false.
//   DTensor  DTensor(f32[5,3], layout=[batch,unsharded], Mesh(batch=2,model=4, CPU), values=[...])
//            the values are the gathered global value (partial sums reduced). With several
//            processes that gathering is collective: every process must print the same DTensor.
//   Mesh     Mesh(batch=2,model=4, CPU); a named mesh adds name=..., a mesh over several
//            processes adds "process k of P".
//   Layout   Layout([unsharded,model] partial:sum(batch), Mesh(batch=2,model=4, CPU))
//
// The long TF text forms stay in to_string() (they parse back); these are for reading.
#pragma once

#include <fmt/ostream.h>

#include <ostream>
#include <string>

#include "dtensor/dtensor.h"
#include "layout/layout.h"
#include "mesh/mesh.h"
#include "runtime/tensor.h"

namespace dtensor {

struct PrintOptions {
  // Above this many elements the values are summarised with "...".
  int64_t threshold = 1000;
  // Entries kept at each end of a summarised dim.
  int64_t edge_items = 3;
  // Significant digits of floating-point values.
  int precision = 6;
};

// The values alone, numpy style: "[[0, 1.5, 2],\n [3, 4, 5]]"; continuation lines are indented by
// `indent` spaces more (for embedding after a prefix).
std::string format_values(const Tensor& tensor, const PrintOptions& options = {}, int indent = 0);

std::string print_string(const Tensor& tensor, const PrintOptions& options = {});
std::string print_string(const DTensor& tensor, const PrintOptions& options = {});
std::string print_string(const Mesh& mesh);
std::string print_string(const Layout& layout);

std::ostream& operator<<(std::ostream& out, const Tensor& tensor);
std::ostream& operator<<(std::ostream& out, const DTensor& tensor);
std::ostream& operator<<(std::ostream& out, const Mesh& mesh);
std::ostream& operator<<(std::ostream& out, const Layout& layout);

}  // namespace dtensor

template <>
struct fmt::formatter<dtensor::Tensor> : fmt::ostream_formatter {};
template <>
struct fmt::formatter<dtensor::DTensor> : fmt::ostream_formatter {};
template <>
struct fmt::formatter<dtensor::Mesh> : fmt::ostream_formatter {};
template <>
struct fmt::formatter<dtensor::Layout> : fmt::ostream_formatter {};
