#!/usr/bin/env bash
# tools/check_layers on a small tree laid out like the real one: it passes as written, and fails,
# naming the file, the line and the floors, once an upward include is added.
#
#   check_layers_test.sh <check_layers>
set -euo pipefail
check=$1
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT

write() {  # write PATH LINE...: a source file whose lines are the remaining arguments
  mkdir -p "$root/$(dirname "$1")"
  local path=$1
  shift
  printf '%s\n' "$@" >"$root/$path"
}
write runtime/tensor.h '#pragma once'
write runtime/element_loops.h '#pragma once' '#include "runtime/tensor.h"'
write runtime/block.cc '#include "runtime/element_loops.h"' '#include <vector>'
write kernels/cpu/matmul.cc '#include "runtime/element_loops.h"' '#include "kernels/cpu/cpu_memory.h"'
write kernels/cpu/cpu_memory.h '#pragma once' '#include "runtime/tensor.h"'
write kernels/cuda/memory.cc '#include "runtime/tensor.h"'
write mesh/mesh.h '#pragma once' '#include "runtime/tensor.h"'
write ops/ops.h '#pragma once' '#include "mesh/mesh.h"'
write train/keras/callbacks.cc '#include "train/progress.h"' '#include "ops/ops.h"'
write train/progress.h '#pragma once'
write cli/plot.cc '#include "train/progress.h"'
write layout/layout_test.cc '#include "tests/layout_enumeration.h"'
write tests/layout_enumeration.h '#pragma once' '#include "mesh/mesh.h"'
write runtime/BUILD 'cc_library(name = "block", deps = [":tensor"], visibility = ["//ops:__pkg__"])' \
  'cc_test(name = "block_test", deps = [":block", "//tests:catch_main"])'
write kernels/BUILD 'load("//tools:copts.bzl", "KERNEL_COPTS")' 'cc_library(deps = ["//runtime:block"])'

expect_pass() {
  if ! out=$("$check" --root "$root"); then
    echo "FAIL: expected a pass: $out"
    exit 1
  fi
}
expect_fail() {  # expect_fail MESSAGE: the check fails and prints MESSAGE
  if out=$("$check" --root "$root"); then
    echo "FAIL: expected a failure with: $1"
    exit 1
  fi
  if ! grep -qF "$1" <<<"$out"; then
    echo "FAIL: expected \"$1\" in:"
    echo "$out"
    exit 1
  fi
}

expect_pass

# A runtime file reaching the op API: the upward include the check exists for.
echo '#include "ops/ops.h"' >>"$root/runtime/block.cc"
expect_fail 'runtime/block.cc:3: #include "ops/ops.h": runtime floor includes ops floor'
write runtime/block.cc '#include "runtime/element_loops.h"'
expect_pass

# Keras callbacks reaching a command-line helper (the display now lives in train/).
echo '#include "cli/plot.h"' >>"$root/train/keras/callbacks.cc"
expect_fail 'train/keras/callbacks.cc:3: #include "cli/plot.h": train floor includes apps floor'
write train/keras/callbacks.cc '#include "train/progress.h"'
expect_pass

# Within a floor: CPU kernels must not see CUDA's.
echo '#include "kernels/cuda/launch.h"' >>"$root/kernels/cpu/cpu_memory.h"
expect_fail 'kernels/cpu/cpu_memory.h:3: #include "kernels/cuda/launch.h": kernels/cpu must not include kernels/cuda'
write kernels/cpu/cpu_memory.h '#pragma once'
expect_pass

# Test support is for tests: a library file of a lower floor may not include it.
write layout/layout.cc '#include "tests/layout_enumeration.h"'
expect_fail 'layout/layout.cc:1: #include "tests/layout_enumeration.h": layout floor includes apps floor'

rm "$root/layout/layout.cc"

# A Bazel dep reaching up fails as an include does; visibility, loads and test mains do not.
expect_pass
echo 'cc_library(name = "random", deps = ["//kernels:memory"])' >>"$root/runtime/BUILD"
expect_fail 'runtime/BUILD:3: "//kernels:memory": runtime floor depends on kernels floor'
write runtime/BUILD 'cc_library(name = "block", deps = ["//ops"])'
expect_fail 'runtime/BUILD:1: "//ops": runtime floor depends on ops floor'

echo "PASS"
