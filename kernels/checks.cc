#include "kernels/checks.h"

#include <algorithm>
#include <string>

#include "runtime/error.h"

namespace dtensor::kernels::checks {

void throw_unsupported(const char* op, const Tensor& t) {
  throw_error<DTypeError>(op, "unsupported dtype {}: {}", dtype_name(t.dtype()), describe(t));
}

void check_index_dtype(const char* op, const Tensor& t, const char* what) {
  if (t.dtype() != DType::kI32 && t.dtype() != DType::kI64) {
    throw_error<DTypeError>(op, "{} must be i32 or i64, got {}", what, describe(t));
  }
}

int64_t normalize_axis(const char* op, int64_t axis, const Tensor& x) {
  const int64_t rank = x.rank();
  if (axis < -rank || axis >= rank) {
    throw_error<InvalidArgumentError>(op, "axis {} is out of range for {}", axis, describe(x));
  }
  return axis < 0 ? axis + rank : axis;
}

bool try_broadcast_shapes(const Shape& a, const Shape& b, Shape* out) {
  const size_t rank = std::max(a.size(), b.size());
  out->assign(rank, 1);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t da = d + a.size() >= rank ? a[d + a.size() - rank] : 1;
    const int64_t db = d + b.size() >= rank ? b[d + b.size() - rank] : 1;
    if (da != db && da != 1 && db != 1) return false;
    (*out)[d] = da == 1 ? db : da;
  }
  return true;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  Shape out;
  if (!try_broadcast_shapes(a, b, &out)) {
    throw_error<ShapeError>(op, "incompatible shapes for broadcasting: {} vs {}",
                            shape_to_string(a), shape_to_string(b));
  }
  return out;
}

bool unary_supports(UnaryOp op, DType dtype) {
  if (dtype == DType::kBool) return false;
  if (!is_integer(dtype)) return true;
  switch (op) {
    case UnaryOp::kNeg:
    case UnaryOp::kAbs:
    case UnaryOp::kSquare:
    case UnaryOp::kRelu:
    case UnaryOp::kReluGrad:
    case UnaryOp::kSign:
      return true;
    default:
      return false;
  }
}

void cross_entropy(const char* op, const Tensor& logits, const Tensor& labels) {
  if (!is_floating(logits.dtype())) throw_unsupported(op, logits);
  if (logits.rank() < 1) {
    throw_error<ShapeError>(op, "logits must have rank >= 1, got {}", describe(logits));
  }
  check_index_dtype(op, labels, "labels");
  const Shape rows(logits.shape().begin(), logits.shape().end() - 1);
  if (labels.shape() != rows) {
    throw_error<ShapeError>(op, "labels {} do not match logits {}", describe(labels),
                            describe(logits));
  }
}

void attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  for (const Tensor* t : {&q, &k, &v}) {
    if (t->dtype() != DType::kF32 && t->dtype() != DType::kF64) throw_unsupported(op, *t);
  }
  const int64_t r = q.rank();
  auto batch = [](const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); };
  if (r < 3 || k.rank() != r || v.rank() != r || batch(k) != batch(q) || batch(v) != batch(q) ||
      k.shape()[r - 1] != q.shape()[r - 1] || v.shape()[r - 2] != k.shape()[r - 2] ||
      (causal && q.shape()[r - 2] != k.shape()[r - 2]) || k.dtype() != q.dtype() ||
      v.dtype() != q.dtype()) {
    throw_error<ShapeError>(op,
                            "q {}, k {} and v {} must be [..., Tq, D], [..., Tk, D] and [..., Tk, "
                            "Dv] of one dtype and rank >= 3 (Tq == Tk when causal)",
                            describe(q), describe(k), describe(v));
  }
}

void attention_grad(const char* op, const Tensor& dy, const Tensor& q, const Tensor& k,
                    const Tensor& v, const Tensor& y, bool causal) {
  attention(op, q, k, v, causal);
  Shape out = q.shape();
  out.back() = v.shape().back();
  for (const Tensor* t : {&dy, &y}) {
    if (t->shape() != out || t->dtype() != q.dtype()) {
      throw_error<ShapeError>(op, "dy {} and y {} must be {} {}", describe(dy), describe(y),
                              dtype_name(q.dtype()), shape_to_string(out));
    }
  }
}

void cross_entropy_grad(const char* op, const Tensor& logits, const Tensor& labels,
                        const Tensor& grad) {
  cross_entropy(op, logits, labels);
  if (grad.dtype() != logits.dtype()) {
    throw_error<DTypeError>(op, "grad {} does not match logits {}", describe(grad),
                            describe(logits));
  }
  if (grad.shape() != labels.shape()) {
    throw_error<ShapeError>(op, "grad {} does not match labels {}", describe(grad),
                            describe(labels));
  }
}

void dense_bias(const Tensor* bias, const Shape& out, DType out_dtype) {
  if (bias != nullptr && bias->dtype() != out_dtype) {
    throw_error<DTypeError>("dense", "bias {} does not match output {}{}", describe(*bias),
                            dtype_name(out_dtype), shape_to_string(out));
  }
  if (bias != nullptr && bias->shape() != Shape{out.back()}) {
    throw_error<ShapeError>("dense", "bias {} does not match output {}{}", describe(*bias),
                            dtype_name(out_dtype), shape_to_string(out));
  }
}

void one_hot(const Tensor& indices, int64_t depth) {
  check_index_dtype("one_hot", indices, "indices");
  if (depth < 0) {
    throw_error<InvalidArgumentError>("one_hot", "depth must be >= 0, got {}", depth);
  }
}

void transpose(const Tensor& x, const std::vector<int64_t>& perm) {
  const int64_t rank = x.rank();
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  bool valid = static_cast<int64_t>(perm.size()) == rank;
  for (size_t i = 0; valid && i < perm.size(); ++i) {
    valid = perm[i] >= 0 && perm[i] < rank && !seen[static_cast<size_t>(perm[i])];
    if (valid) seen[static_cast<size_t>(perm[i])] = true;
  }
  if (!valid) {
    throw_error<InvalidArgumentError>("transpose",
                                      "perm [{}] is not a permutation of the axes of {}",
                                      fmt::join(perm, ","), describe(x));
  }
}

void concat(const std::vector<Tensor>& xs, int64_t axis) {
  if (xs.empty()) throw_error<InvalidArgumentError>("concat", "needs at least one tensor");
  const Tensor& first = xs.front();
  if (first.rank() == 0) {
    throw_error<ShapeError>("concat", "cannot concatenate scalars: {}", describe(first));
  }
  const int64_t ax = normalize_axis("concat", axis, first);
  for (const Tensor& x : xs) {
    if (x.dtype() != first.dtype()) {
      throw_error<DTypeError>("concat", "dtypes differ: {} vs {}", describe(first), describe(x));
    }
    bool same = x.rank() == first.rank();
    for (int64_t d = 0; same && d < x.rank(); ++d) same = d == ax || x.dim(d) == first.dim(d);
    if (!same) {
      throw_error<ShapeError>("concat", "shapes differ outside axis {}: {} vs {}", ax,
                              describe(first), describe(x));
    }
  }
}

void slice(const Tensor& x, const std::vector<int64_t>& begin, const Shape& size) {
  const int64_t rank = x.rank();
  if (static_cast<int64_t>(begin.size()) != rank || static_cast<int64_t>(size.size()) != rank) {
    throw_error<InvalidArgumentError>("slice", "begin [{}] and size {} do not match the rank of {}",
                                      fmt::join(begin, ","), shape_to_string(size), describe(x));
  }
  for (int64_t d = 0; d < rank; ++d) {
    const size_t i = static_cast<size_t>(d);
    const bool begin_ok = begin[i] >= 0 && begin[i] <= x.dim(d);
    const int64_t extent = size[i] == -1 && begin_ok ? x.dim(d) - begin[i] : size[i];
    if (!begin_ok || extent < 0 || begin[i] + extent > x.dim(d)) {
      throw_error<InvalidArgumentError>("slice", "box at [{}] of size {} does not fit {}",
                                        fmt::join(begin, ","), shape_to_string(size), describe(x));
    }
  }
}

void pad(const Tensor& x, const std::vector<std::pair<int64_t, int64_t>>& paddings) {
  auto paddings_string = [&] {
    std::string s;
    for (const auto& [lo, hi] : paddings)
      s += fmt::format("{}({},{})", s.empty() ? "" : ",", lo, hi);
    return "[" + s + "]";
  };
  if (static_cast<int64_t>(paddings.size()) != x.rank()) {
    throw_error<InvalidArgumentError>("pad", "paddings {} do not match the rank of {}",
                                      paddings_string(), describe(x));
  }
  for (const auto& [before, after] : paddings) {
    if (before < 0 || after < 0) {
      throw_error<InvalidArgumentError>("pad", "paddings {} must be non-negative for {}",
                                        paddings_string(), describe(x));
    }
  }
}

void gather(const Tensor& params, const Tensor& indices, int64_t axis) {
  if (params.rank() < 1) {
    throw_error<ShapeError>("gather", "params must have rank >= 1, got {}", describe(params));
  }
  check_index_dtype("gather", indices, "indices");
  normalize_axis("gather", axis, params);
}

void scatter_add(const Shape& shape, const Tensor& indices, const Tensor& updates, int64_t axis) {
  const char* op = "scatter_add";
  validate_shape(shape, op);
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (rank < 1) throw_error<ShapeError>(op, "output shape must have rank >= 1, got []");
  if (axis < -rank || axis >= rank) {
    throw_error<InvalidArgumentError>(op, "axis {} is out of range for {}", axis,
                                      shape_to_string(shape));
  }
  const int64_t ax = axis < 0 ? axis + rank : axis;
  check_index_dtype(op, indices, "indices");
  if (updates.dtype() == DType::kBool) throw_unsupported(op, updates);
  const Shape expected = gathered_shape(shape, indices.shape(), ax);
  if (updates.shape() != expected) {
    throw_error<ShapeError>(op,
                            "updates {} should have shape {} for indices {} into {} along axis {}",
                            describe(updates), shape_to_string(expected), describe(indices),
                            shape_to_string(shape), ax);
  }
}

namespace {

// A table shard's (first row, rows): an i64 tensor of two elements.
void check_shard(const char* op, const Tensor& shard) {
  if (shard.dtype() != DType::kI64 || shard.num_elements() != 2) {
    throw_error<InvalidArgumentError>(op, "shard must be i64 (first row, rows), got {}",
                                      describe(shard));
  }
}

}  // namespace

void gather_shard_rows(const Tensor& params, const Tensor& indices, const Tensor& shard,
                       int64_t vocab) {
  gather(params, indices, 0);
  check_shard("gather", shard);
  if (vocab < 0) throw_error<InvalidArgumentError>("gather", "vocab must be >= 0, got {}", vocab);
}

void scatter_add_shard_rows(const Tensor& indices, const Tensor& updates, const Tensor& shard,
                            int64_t chunk_rows) {
  const char* op = "scatter_add";
  check_index_dtype(op, indices, "indices");
  if (updates.dtype() == DType::kBool) throw_unsupported(op, updates);
  const Shape& u = updates.shape();
  if (u.size() < indices.shape().size() ||
      !std::equal(indices.shape().begin(), indices.shape().end(), u.begin())) {
    throw_error<ShapeError>(op, "updates {} should start with the shape of indices {}",
                            describe(updates), describe(indices));
  }
  check_shard(op, shard);
  const bool wide = updates.dtype() == DType::kF32 || updates.dtype() == DType::kF64;
  if (chunk_rows < 0 || (chunk_rows > 0 && !wide)) {
    throw_error<InvalidArgumentError>(op, "chunk_rows {} must be >= 0, and 0 for {}", chunk_rows,
                                      describe(updates));
  }
}

namespace {

void check_conv_params(const char* op, const Conv2dParams& p) {
  if (p.stride_h < 1 || p.stride_w < 1 || p.dilation_h < 1 || p.dilation_w < 1 || p.groups < 1 ||
      p.pad_top < 0 || p.pad_bottom < 0 || p.pad_left < 0 || p.pad_right < 0) {
    throw_error<InvalidArgumentError>(
        op,
        "strides {}x{}, dilations {}x{} and groups {} must be >= 1 and paddings {},{},{},{} >= 0",
        p.stride_h, p.stride_w, p.dilation_h, p.dilation_w, p.groups, p.pad_top, p.pad_bottom,
        p.pad_left, p.pad_right);
  }
}

void check_float_pair(const char* op, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype()) {
    throw_error<DTypeError>(op, "dtypes differ: {} and {}", describe(a), describe(b));
  }
  if (!is_floating(a.dtype())) throw_unsupported(op, a);
}

// The operands of a convolution pass: one float dtype, and bf16 when the result is asked in f32.
void check_conv_operands(const char* op, const Tensor& a, const Tensor& b, const Conv2dParams& p) {
  check_float_pair(op, a, b);
  if (p.f32_output && a.dtype() != DType::kBF16) {
    throw_error<DTypeError>(op, "f32_output needs bf16 operands: {} and {}", describe(a),
                            describe(b));
  }
}

void check_dy(const char* op, const Tensor& dy, const ConvGeometry& g) {
  if (dy.shape() != Shape{g.n, g.oh, g.ow, g.o}) {
    throw_error<ShapeError>(op, "dy {} must be [{},{},{},{}]", describe(dy), g.n, g.oh, g.ow, g.o);
  }
}

}  // namespace

ConvGeometry conv_geometry(const char* op, const Shape& x, const Shape& w, const Conv2dParams& p) {
  check_conv_params(op, p);
  if (x.size() != 4 || w.size() != 4) {
    throw_error<ShapeError>(op, "x {} must be [n,h,w,c] and w {} [kh,kw,c/groups,o]",
                            shape_to_string(x), shape_to_string(w));
  }
  ConvGeometry g;
  g.n = x[0], g.h = x[1], g.w = x[2], g.c = x[3];
  g.kh = w[0], g.kw = w[1], g.cpg = w[2], g.o = w[3];
  g.groups = p.groups;
  if (g.cpg * g.groups != g.c || g.o % g.groups != 0) {
    throw_error<ShapeError>(op, "x {} has {} channels, w {} takes {} in each of {} groups",
                            shape_to_string(x), g.c, shape_to_string(w), g.cpg, g.groups);
  }
  g.oh = conv_output_size(g.h, p.pad_top, p.pad_bottom, g.kh, p.dilation_h, p.stride_h);
  g.ow = conv_output_size(g.w, p.pad_left, p.pad_right, g.kw, p.dilation_w, p.stride_w);
  if (g.oh == kOutputSizeOverflow || g.ow == kOutputSizeOverflow) {
    throw_error<InvalidArgumentError>(
        op,
        "x {} padded by {},{},{},{} or the {}x{} window dilated {}x{} is larger than int64 holds",
        shape_to_string(x), p.pad_top, p.pad_bottom, p.pad_left, p.pad_right, g.kh, g.kw,
        p.dilation_h, p.dilation_w);
  }
  if (g.oh < 1 || g.ow < 1 || g.kh < 1 || g.kw < 1) {
    throw_error<ShapeError>(
        op, "the {}x{} window (dilation {}x{}) does not fit x {} padded by {},{},{},{}", g.kh, g.kw,
        p.dilation_h, p.dilation_w, shape_to_string(x), p.pad_top, p.pad_bottom, p.pad_left,
        p.pad_right);
  }
  return g;
}

void conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  check_conv_operands("conv2d", x, w, p);
  conv_geometry("conv2d", x.shape(), w.shape(), p);
}

void conv2d_bias(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  const char* op = "conv2d_bias";
  check_conv_operands(op, x, w, p);
  const ConvGeometry g = conv_geometry(op, x.shape(), w.shape(), p);
  const DType out = p.f32_output ? DType::kF32 : x.dtype();
  if (bias.dtype() != out || bias.shape() != Shape{g.o}) {
    const std::string message =
        fmt::format("bias {} must be {}[{}] for the output {}[{},{},{},{}]", describe(bias),
                    dtype_name(out), g.o, dtype_name(out), g.n, g.oh, g.ow, g.o);
    if (bias.dtype() != out) throw_error<DTypeError>(op, "{}", message);
    throw_error<ShapeError>(op, "{}", message);
  }
}

void conv2d_backprop_input(const Shape& x_shape, const Tensor& w, const Tensor& dy,
                           const Conv2dParams& p) {
  const char* op = "conv2d_backprop_input";
  check_conv_operands(op, w, dy, p);
  check_dy(op, dy, conv_geometry(op, x_shape, w.shape(), p));
}

void conv2d_backprop_filter(const Tensor& x, const Shape& w_shape, const Tensor& dy,
                            const Conv2dParams& p) {
  const char* op = "conv2d_backprop_filter";
  check_conv_operands(op, x, dy, p);
  check_dy(op, dy, conv_geometry(op, x.shape(), w_shape, p));
}

Shape transposed_shape(const Shape& x, const std::vector<int64_t>& perm) {
  Shape out(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) out[i] = x[static_cast<size_t>(perm[i])];
  return out;
}

Shape slice_extent(const Shape& x, const std::vector<int64_t>& begin, const Shape& size) {
  Shape extent = size;
  for (size_t d = 0; d < extent.size(); ++d) {
    if (extent[d] == -1) extent[d] = x[d] - begin[d];
  }
  return extent;
}

Shape gathered_shape(const Shape& shape, const Shape& indices, int64_t axis) {
  Shape out(shape.begin(), shape.begin() + axis);
  out.insert(out.end(), indices.begin(), indices.end());
  out.insert(out.end(), shape.begin() + axis + 1, shape.end());
  return out;
}

}  // namespace dtensor::kernels::checks
