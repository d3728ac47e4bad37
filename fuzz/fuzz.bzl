"""dtensor_fuzz_target: one libFuzzer harness, its fuzzer binary and its corpus replay test."""

def dtensor_fuzz_target(name, srcs, deps = [], size = "small"):
    """Declares <name>_harness, <name>_fuzzer and <name>_replay_test.

    The harness defines LLVMFuzzerTestOneInput. <name>_fuzzer links it with libFuzzer: build it
    with --config=fuzz (clang); it is tagged manual so that gcc builds of //... skip it.
    <name>_replay_test (default suite, any compiler) feeds it every file under
    fuzz/corpus/<name>/ and fuzz/regressions/<name>/.
    """
    native.cc_library(
        name = name + "_harness",
        testonly = True,
        srcs = srcs,
        deps = deps + ["//fuzz:harness"],
        alwayslink = True,
    )
    native.cc_binary(
        name = name + "_fuzzer",
        testonly = True,
        deps = [":" + name + "_harness"],
        linkopts = ["-fsanitize=fuzzer"],
        tags = ["manual"],
    )
    inputs = native.glob(
        ["corpus/" + name + "/**", "regressions/" + name + "/**"],
        allow_empty = True,
    )
    native.cc_test(
        name = name + "_replay_test",
        size = size,
        srcs = ["replay_main.cc"],
        data = inputs,
        args = ["fuzz/corpus/" + name, "fuzz/regressions/" + name],
        deps = [":" + name + "_harness"],
    )
