/* Forced into every C++ file of a wheel build (HIERCOLL_GLIBCXX_FLOOR, pyproject.toml): references to
 * std::condition_variable::wait(unique_lock&) bind to its GLIBCXX_3.4.11 version, which every libstdc++ since gcc 4.6
 * exports, instead of the GLIBCXX_3.4.30 default gcc 12 added for the same function (made noexcept: only thread
 * cancellation behaves differently, and nothing here cancels threads). It is the one symbol that needs gcc 12's
 * libstdc++; without it the wheels load on gcc 11's (Amazon Linux 2023, RHEL 9): manylinux_2_34, not 2_35
 * (docs/install.md). */
#if defined(__cplusplus) && defined(__x86_64__) && defined(__linux__)
__asm__(".symver _ZNSt18condition_variable4waitERSt11unique_lockISt5mutexE,"
        "_ZNSt18condition_variable4waitERSt11unique_lockISt5mutexE@GLIBCXX_3.4.11");
#endif
