"""Compiler flags that only one compiler understands."""

# GCC 12's dynamic vectorizer cost model (see the BUILD files that use it). Clang, which builds
# the fuzzers (--config=fuzz), rejects the flag and vectorizes such loops by default.
GCC_VECTORIZE_COPTS = select({
    "//tools:clang": [],
    "//conditions:default": ["-fvect-cost-model=dynamic"],
})
