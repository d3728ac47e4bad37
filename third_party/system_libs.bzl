"""Repository rules exposing the Debian system libraries (and CUDA when present) to Bazel.

Everything here is found on the host, never downloaded: `tools/bazel` installs the Debian packages
before Bazel runs, and these rules fail with a message naming the missing package otherwise.
"""

def _find_first(rctx, candidates):
    for c in candidates:
        if rctx.path(c).exists:
            return c
    return None

def _require(rctx, path, package):
    if not rctx.path(path).exists:
        fail("dtensor: '{}' not found; install the Debian package '{}' (tools/bazel does this)".format(path, package))

def _mpi_dirs(rctx):
    res = rctx.execute(["mpicc", "--showme:incdirs"])
    if res.return_code != 0:
        fail("dtensor: mpicc not found; install 'libopenmpi-dev' and 'openmpi-bin' (tools/bazel does this)")
    incdirs = res.stdout.strip().split(" ")
    res = rctx.execute(["mpicc", "--showme:libdirs"])
    libdirs = res.stdout.strip().split(" ")
    return incdirs[0], libdirs[0]

def _system_libs_impl(rctx):
    _require(rctx, "/usr/include/fmt/format.h", "libfmt-dev")
    _require(rctx, "/usr/include/catch2/catch.hpp", "catch2")
    _require(rctx, "/usr/include/nlohmann/json.hpp", "nlohmann-json3-dev")
    _require(rctx, "/usr/include/CLI/CLI.hpp", "libcli11-dev")
    _require(rctx, "/usr/include/cairo/cairo.h", "libcairo2-dev")
    _require(rctx, "/usr/include/google/protobuf/message_lite.h", "libprotobuf-dev")
    _require(rctx, "/usr/bin/protoc", "protobuf-compiler")
    _require(rctx, "/usr/include/dnnl.hpp", "libdnnl-dev")
    blas_inc = _find_first(rctx, [
        "/usr/include/x86_64-linux-gnu/openblas-pthread",
        "/usr/include/aarch64-linux-gnu/openblas-pthread",
        "/usr/include/openblas",
    ])
    if blas_inc == None:
        fail("dtensor: OpenBLAS headers not found; install 'libopenblas-dev' (tools/bazel does this)")
    mpi_inc, mpi_lib = _mpi_dirs(rctx)
    rctx.symlink(blas_inc, "openblas_include")
    rctx.symlink(mpi_inc, "mpi_include")
    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

cc_library(name = "fmt", linkopts = ["-lfmt"])

cc_library(name = "catch2")

cc_library(name = "json")

cc_library(
    name = "openblas",
    hdrs = glob(["openblas_include/*.h"]),
    includes = ["openblas_include"],
    linkopts = ["-lopenblas"],
)

cc_library(
    name = "mpi",
    hdrs = glob(["mpi_include/**/*.h"]),
    defines = ["OMPI_SKIP_MPICXX"],
    includes = ["mpi_include"],
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lmpi"],
)

cc_library(name = "zlib", linkopts = ["-lz"])

# oneDNN 2.6 (<dnnl.hpp>): CPU matmul, convolution and pooling primitives. Debian builds it with
# the OpenMP runtime, so a call uses the OpenMP thread count of the thread that makes it.
cc_library(name = "dnnl", linkopts = ["-ldnnl"])

# CLI11 2.x: header-only command-line parsing (<CLI/CLI.hpp>).
cc_library(name = "cli11")

# cairo: 2D drawing with text, PNG output (<cairo/cairo.h>).
cc_library(name = "cairo", linkopts = ["-lcairo"])

# Protocol buffers runtime; .proto files are compiled by the system protoc (see protoc below).
cc_library(name = "protobuf", linkopts = ["-lprotobuf"])
""".format(lib = mpi_lib))

system_libs = repository_rule(
    implementation = _system_libs_impl,
    local = True,
    environ = ["PATH"],
)

def _local_cuda_impl(rctx):
    root = rctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    has_cuda = rctx.path(root + "/include/cuda_runtime.h").exists and rctx.path(root + "/bin/nvcc").exists
    rctx.file("defs.bzl", "HAS_CUDA = {}\nCUDA_ROOT = \"{}\"\n".format(has_cuda, root))
    if not has_cuda:
        rctx.file("BUILD", "# CUDA not found at {}: CUDA targets are not built.\n".format(root))
        return
    rctx.symlink(root + "/include", "include")
    rctx.symlink(root + "/lib64", "lib64")
    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

exports_files(["defs.bzl"])

cc_library(
    name = "cudart",
    hdrs = glob(["include/*.h", "include/crt/*.h", "include/crt/*.hpp"]),
    includes = ["include"],
    linkopts = ["-L{root}/lib64", "-Wl,-rpath,{root}/lib64", "-lcudart"],
)

cc_library(
    name = "cublas",
    deps = [":cudart"],
    linkopts = ["-lcublas", "-lcublasLt"],
)

cc_library(
    name = "nccl",
    deps = [":cudart"],
    linkopts = ["-lnccl"],
)
""".format(root = root))

local_cuda = repository_rule(
    implementation = _local_cuda_impl,
    local = True,
    environ = ["CUDA_PATH"],
)
