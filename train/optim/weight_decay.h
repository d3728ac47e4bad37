// L2 weight decay on chosen variables, as a loss term (TensorFlow's CIFAR-10 tutorial: `wd *
// tf.nn.l2_loss(w)` added to the loss for the dense layers' weights only).
//
// The terms are built from DTensor ops (square, reduce_sum, scale, add), so inside a GradientTape
// their gradient, wd * w, is taken and sharded like any other: under every layout of a variable
// the decay's gradient arrives in the variable's layout with the data loss's gradient, and one
// optimizer step applies both. This is coupled decay (part of the loss, seen by momentum and Adam
// moments), not AdamW's decoupled decay.
//
// Stateless functions; thread-safe as the ops they call are (one tape per thread).
#pragma once

#include <vector>

#include "dtensor/variable.h"

namespace dtensor {

// sum(x^2) / 2 as a replicated scalar of x's dtype (tf.nn.l2_loss). DTypeError unless x is f32,
// f64 or bf16.
DTensor l2_loss(const DTensor& x);

// wd * (l2_loss(v_1) + ... + l2_loss(v_n)): add it to the loss inside the tape that watches the
// variables. InvalidArgumentError for no variables, a negative or non-finite wd, or variables on
// different meshes or of different dtypes (the message names them); DTypeError as for l2_loss.
DTensor weight_decay_loss(const std::vector<DVariable>& vars, double wd);

}  // namespace dtensor
