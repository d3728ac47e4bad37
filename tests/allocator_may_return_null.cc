// Linked into tests that check what a failed allocation gives: ASan and TSan abort on an
// allocation they cannot serve unless told to return null, as the plain allocator does.
#if defined(__SANITIZE_ADDRESS__)
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
#endif
#if defined(__SANITIZE_THREAD__)
extern "C" const char* __tsan_default_options() { return "allocator_may_return_null=1"; }
#endif
