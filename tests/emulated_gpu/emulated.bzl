"""emulated_gpu_test: a cc_test on the emulated GPU (DTENSOR_EMULATED_GPUS=2)."""

def emulated_gpu_test(name, deps, srcs = [], env = {}, **kwargs):
    """A cc_test with the emulated GPU on. In a --config=cuda build, where the emulated GPU is not
    linked, the test is a main that prints that it is skipped."""
    native.cc_test(
        name = name,
        srcs = select({
            "//tools:cuda": ["//tests/emulated_gpu:skipped_main.cc"],
            "//conditions:default": srcs,
        }),
        deps = select({
            "//tools:cuda": [],
            "//conditions:default": deps + [
                "//kernels/emulated",
                "//runtime/emulated",
                "//tests:catch_main",
            ],
        }),
        env = dict({"DTENSOR_EMULATED_GPUS": "2"}, **env),
        **kwargs
    )
