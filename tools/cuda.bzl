"""nvcc through Bazel: `cuda_library` compiles .cu files into objects that a cc_library links.

Each .cu file becomes one genrule running nvcc for sm_80 (A100) and sm_90 (H100/H200) plus
compute_90 PTX, so a newer GPU can JIT the PTX. The .cu files include only headers listed in `hdrs` (and CUDA's): they
see raw pointers and sizes, never Tensor or fmt, so nvcc stays away from the rest of the tree.
Every macro here generates its targets only where CUDA is installed (`HAS_CUDA` of @local_cuda)
and nothing otherwise, so a BUILD file lists its CUDA targets plainly and //... builds on machines
without CUDA too. (Only --config=cuda selects them there, and fails: no CUDA to build with.)
"""

load("@local_cuda//:defs.bzl", "CUDA_ROOT", "HAS_CUDA")

NVCC_FLAGS = [
    "-std=c++17",
    "-O3",
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
    "--expt-relaxed-constexpr",
    "-Xcompiler=-fPIC,-Wall,-Wextra,-Werror,-Wno-unused-parameter",
    "-Werror=all-warnings",
    "-lineinfo",
]

def cuda_library(name, srcs, hdrs = [], deps = [], **kwargs):
    """A cc_library of the nvcc objects of `srcs` (.cu) with `hdrs`; links cudart."""
    if not HAS_CUDA:
        return
    objs = []
    for src in srcs:
        obj = "_{}_objs/{}".format(name, src.replace(".cu", ".o"))
        native.genrule(
            name = "_{}_{}_nvcc".format(name, src.replace("/", "_").replace(".", "_")),
            srcs = [src] + hdrs,
            outs = [obj],
            cmd = "{nvcc} {flags} -I. -I$(GENDIR) -c $(location {src}) -o $@".format(
                nvcc = CUDA_ROOT + "/bin/nvcc",
                flags = " ".join(NVCC_FLAGS),
                src = src,
            ),
            message = "nvcc " + src,
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart"],
        alwayslink = True,
        **kwargs
    )

def cuda_cc_library(name, **kwargs):
    """A cc_library of host code that calls CUDA (runtime, cuBLAS, NCCL)."""
    if HAS_CUDA:
        native.cc_library(name = name, **kwargs)

def gpu_cc_test(name, **kwargs):
    """A cc_test of GPU code, linked statically so that its CUDA backend (alwayslink) registers
    itself (runtime/gpu_backend.h) and fills the kernel front's GPU table before main."""
    if HAS_CUDA:
        native.cc_test(name = name, linkstatic = True, **kwargs)

def gpu_sh_test(name, **kwargs):
    """An sh_test about GPU binaries (it names them in `data`), where CUDA is installed."""
    if HAS_CUDA:
        native.sh_test(name = name, **kwargs)

def gpu_cc_binary(name, **kwargs):
    """A cc_binary of GPU code (benches), linked like gpu_cc_test."""
    if HAS_CUDA:
        native.cc_binary(name = name, linkstatic = True, **kwargs)
