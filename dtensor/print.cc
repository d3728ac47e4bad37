#include "dtensor/print.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "dtensor/host_copy.h"
#include "runtime/device.h"

namespace dtensor {
namespace {

// One element as text: integers as they are, floating point in `precision` significant digits
// with "nan", "inf" and "-inf" spelled out.
template <typename T>
std::string element(const T& v, int precision) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_integral_v<T>) {
    return std::to_string(v);
  } else {
    double x;
    if constexpr (std::is_same_v<T, BFloat16>) {
      x = static_cast<double>(static_cast<float>(v));
    } else {
      x = static_cast<double>(v);
    }
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
    return fmt::format("{:.{}g}", x, precision);
  }
}

// The indices shown along a dim of `size`: all of them, or the edges with -1 marking "...".
std::vector<int64_t> shown(int64_t size, bool summarise, int64_t edge) {
  std::vector<int64_t> out;
  if (!summarise || size <= 2 * edge) {
    for (int64_t i = 0; i < size; ++i) out.push_back(i);
    return out;
  }
  for (int64_t i = 0; i < edge; ++i) out.push_back(i);
  out.push_back(-1);
  for (int64_t i = size - edge; i < size; ++i) out.push_back(i);
  return out;
}

class ValuesPrinter {
 public:
  ValuesPrinter(const Tensor& t, const PrintOptions& o, int indent)
      : t_(t), o_(o), indent_(indent), summarise_(t.num_elements() > o.threshold) {
    strides_.assign(t.shape().size(), 1);
    for (int64_t d = t.rank() - 2; d >= 0; --d) strides_[d] = strides_[d + 1] * t.dim(d + 1);
    visit_dtype(t.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const T* data = t.data<T>();
      texts_ = [data, this](int64_t offset) { return element(data[offset], o_.precision); };
    });
    // One width for every element shown, so columns line up.
    width_ = 0;
    collect_width(0, 0);
  }

  std::string print() {
    if (t_.num_elements() == 0) return "[]";
    if (t_.rank() == 0) return texts_(0);
    std::string out;
    print_dim(0, 0, out);
    return out;
  }

 private:
  void collect_width(int64_t dim, int64_t offset) {
    if (t_.num_elements() == 0) return;
    if (dim == t_.rank()) {
      width_ = std::max(width_, texts_(offset).size());
      return;
    }
    for (int64_t i : shown(t_.dim(dim), summarise_, o_.edge_items)) {
      if (i >= 0) collect_width(dim + 1, offset + i * strides_[dim]);
    }
  }

  void print_dim(int64_t dim, int64_t offset, std::string& out) {
    out += '[';
    const bool last_dim = dim + 1 == t_.rank();
    // Rows below a block of rank >= 3 are separated by a blank line, as numpy does.
    const std::string row_break =
        last_dim ? ", "
                 : ",\n" + std::string(static_cast<size_t>(t_.rank() - dim - 2), '\n') +
                       std::string(static_cast<size_t>(indent_ + dim + 1), ' ');
    bool first = true;
    for (int64_t i : shown(t_.dim(dim), summarise_, o_.edge_items)) {
      if (!first) out += row_break;
      first = false;
      if (i < 0) {
        out += "...";
      } else if (last_dim) {
        std::string text = texts_(offset + i);
        out += std::string(width_ - text.size(), ' ') + text;
      } else {
        print_dim(dim + 1, offset + i * strides_[dim], out);
      }
    }
    out += ']';
  }

  const Tensor& t_;
  const PrintOptions& o_;
  int indent_;
  bool summarise_;
  std::vector<int64_t> strides_;
  std::function<std::string(int64_t)> texts_;
  size_t width_ = 0;
};

std::string type_and_shape(DType dtype, const Shape& shape) {
  return fmt::format("{}[{}]", dtype_name(dtype), fmt::join(shape, ","));
}

}  // namespace

std::string format_values(const Tensor& tensor, const PrintOptions& options, int indent) {
  // Device memory is read from a host copy (printing is not a hot path).
  const Tensor host = host_readable(tensor);
  return ValuesPrinter(host, options, indent).print();
}

std::string print_string(const Tensor& tensor, const PrintOptions& options) {
  std::string head = "Tensor(" + type_and_shape(tensor.dtype(), tensor.shape()) + ", ";
  return head + format_values(tensor, options, static_cast<int>(head.size())) + ")";
}

std::string print_string(const DTensor& tensor, const PrintOptions& options) {
  const Tensor global = to_global(tensor);
  std::string head = "DTensor(" + type_and_shape(tensor.dtype(), tensor.shape()) +
                     ", layout=" + tensor.layout().short_string() + ", " +
                     print_string(tensor.mesh()) + ",\n        values=";
  return head + format_values(global, options, 15) + ")";
}

std::string print_string(const Mesh& mesh) {
  std::string out = "Mesh(";
  if (!mesh.name().empty()) out += "name=" + mesh.name() + ", ";
  out += mesh.dims_string() + ", " + std::string(device_type_name(mesh.device_type()));
  if (mesh.num_processes() > 1) {
    out += fmt::format(", process {} of {}", mesh.process_index(), mesh.num_processes());
  }
  return out + ")";
}

std::string print_string(const Layout& layout) {
  return "Layout(" + layout.short_string() + ", " + print_string(layout.mesh()) + ")";
}

std::ostream& operator<<(std::ostream& out, const Tensor& tensor) {
  return out << print_string(tensor);
}
std::ostream& operator<<(std::ostream& out, const DTensor& tensor) {
  return out << print_string(tensor);
}
std::ostream& operator<<(std::ostream& out, const Mesh& mesh) { return out << print_string(mesh); }
std::ostream& operator<<(std::ostream& out, const Layout& layout) {
  return out << print_string(layout);
}

}  // namespace dtensor
