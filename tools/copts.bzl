"""Compiler flags that only one compiler understands."""

# GCC 12's dynamic vectorizer cost model (see the BUILD files that use it). Clang, which builds
# the fuzzers (--config=fuzz), rejects the flag and vectorizes such loops by default.
GCC_VECTORIZE_COPTS = select({
    "//tools:clang": [],
    "//conditions:default": ["-fvect-cost-model=dynamic"],
})

# The element loops' flags (//kernels, //runtime:element_loops). GCC 12 at -O2 only vectorizes
# loops whose trip count is a known multiple of the vector width ("very-cheap" cost model); the
# loops have runtime lengths, so use the dynamic model. -fno-math-errno lets sqrt vectorize
# (nothing here reads errno), and -fno-trapping-math lets selects between float results (NaN
# handling, clamps) if-convert; neither changes any result, since nothing here inspects errno or
# the floating-point exception flags.
KERNEL_COPTS = [
    "-fno-math-errno",
    "-fno-trapping-math",
] + GCC_VECTORIZE_COPTS
