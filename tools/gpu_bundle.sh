#!/bin/bash
# Builds the GPU test and bench binaries with the CUDA backend (--config=cuda) and gathers them,
# with the shared libraries they load, into one git-ignored folder for a machine with a GPU but no
# Bazel (the lent H100/H200 of the device tool):
#
#   tools/gpu_bundle.sh            # -> bazel-gpu-bundle/ and bazel-gpu-bundle.tar.xz
#   (on the GPU machine)  tar xJf bazel-gpu-bundle.tar.xz && bazel-gpu-bundle/run_all.sh
#
# The device tool carries ignored paths of the checkout its session started in (not of a helper's
# worktree): copy bazel-gpu-bundle.tar.xz into that checkout's root (the name is git-ignored there
# too), name it in `carry`, and run the line above; $OUT then receives the logs.
#
# Libraries: everything ldd lists is copied except the C library family (libc, libm, libdl,
# libpthread, librt, the loader: they must be the target's own) and the CUDA driver, runtime,
# cuBLAS, cuDNN and NCCL, which the GPU machine has in the same major version (CUDA 13, cuDNN 9;
# the binaries' rpath names /usr/local/cuda/lib64, and run_all.sh adds it to LD_LIBRARY_PATH and
# finds a library missing there under /usr/local, /opt and /usr/lib). cuBLASLt and cuDNN's
# engine libraries are each several hundred MB, too big to carry. The folder name starts with
# bazel- so that the root .gitignore (/bazel-*) covers it.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=bazel-gpu-bundle
TESTS=(
  //runtime/cuda:cuda_runtime_test
  //kernels/cuda:cuda_kernels_test
)
BENCHES=()
EXTRA=()
EXTRA_NAMES=()  # the name of each EXTRA binary in the bundle (the target's name by default)
if [[ -f tools/gpu_bundle_targets.txt ]]; then
  while read -r kind target name; do
    case "$kind" in
      test) TESTS+=("$target") ;;
      bench) BENCHES+=("$target") ;;
      extra) EXTRA+=("$target") && EXTRA_NAMES+=("${name:-${target##*:}}") ;;
    esac
  done < <(grep -v '^#' tools/gpu_bundle_targets.txt | grep -v '^$')
fi

tools/bazel build --config=cuda "${TESTS[@]}" "${BENCHES[@]}" "${EXTRA[@]}"
BIN=$(tools/bazel info --config=cuda bazel-bin 2>/dev/null)

rm -rf "$OUT" "$OUT.tar.xz"
mkdir -p "$OUT/bin" "$OUT/lib"
copy_target() {  # //pkg:name [as] -> $OUT/bin/name (or $OUT/bin/as)
  local label=$1 pkg name dest
  pkg=${label#//}
  pkg=${pkg%%:*}
  name=${label##*:}
  dest=${2:-$name}
  cp -L "$BIN/$pkg/$name" "$OUT/bin/$dest"
  chmod u+w "$OUT/bin/$dest"
  strip --strip-debug "$OUT/bin/$dest"
  echo "$dest"
}
: >"$OUT/tests.txt"
: >"$OUT/benches.txt"
for t in "${TESTS[@]}"; do copy_target "$t" >>"$OUT/tests.txt"; done
# gpu_mesh_test runs twice: its [labels] cases may crash until ops/softmax.cc checks labels on
# GPU meshes (see the test), and must not take the other cases down with them.
if grep -qx gpu_mesh_test "$OUT/tests.txt"; then
  sed -i 's/^gpu_mesh_test$/gpu_mesh_test ~[labels]\ngpu_mesh_test [labels]/' "$OUT/tests.txt"
fi
for t in "${BENCHES[@]}"; do copy_target "$t" >>"$OUT/benches.txt"; done
for i in "${!EXTRA[@]}"; do copy_target "${EXTRA[$i]}" "${EXTRA_NAMES[$i]}" >/dev/null; done

SKIP='^(libc|libm|libdl|libpthread|librt|ld-linux.*|linux-vdso|libcuda|libcudart|libcublas|libcublasLt|libnccl|libcudnn[a-z_]*)\.so'
for f in "$OUT"/bin/*; do
  ldd "$f" | awk '/=> \// {print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ ! "$name" =~ $SKIP ]]; then cp -L "$path" "$OUT/lib/$name"; fi
done

cp tools/gpu_run_all.sh "$OUT/run_all.sh"
chmod +x "$OUT/run_all.sh"
cp bench/peers_gpu_step.py bench/peers_gpu_cnn_step.py bench/peers_cnn.py "$OUT/"
# MNIST for the example's GPU run (run_all.sh mnist), when this machine has it.
MNIST=${MNIST_DIR:-/work/shared/data/mnist}
if [[ -d "$MNIST" ]]; then mkdir -p "$OUT/data/mnist" && cp "$MNIST"/*-ubyte* "$OUT/data/mnist/"; fi
# Fashion-MNIST for the CNN example's GPU run (run_all.sh cnn): Debian's dataset-fashion-mnist.
FASHION=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
if [[ -d "$FASHION" ]]; then
  mkdir -p "$OUT/data/fashion-mnist" && cp "$FASHION"/*-ubyte* "$OUT/data/fashion-mnist/"
  # Unpacked: xz packs the raw files 4 MB smaller than their gzip copies, which keeps the
  # archive under the device tool's 64 MiB (the examples read raw or .gz files alike).
  gunzip -f "$OUT"/data/fashion-mnist/*.gz 2>/dev/null || true
fi
tar cf - "$OUT" | xz -6 -T2 >"$OUT.tar.xz"
du -sh "$OUT" "$OUT.tar.xz"
