// Signal handlers that libfabric's dependencies install behind the program's back, taken out as libhiercoll loads.
//
// Debian's and Ubuntu's libfabric link the psm provider, whose libinfinipath installs, from its constructor, a
// handler for SIGINT, SIGILL, SIGABRT, SIGBUS, SIGSEGV and SIGTERM that prints a backtrace and calls exit(). A
// SIGTERM from torchrun, Slurm or hiercoll_launch then no longer ends a rank: exit() runs the static destructors
// while the rank's threads (progress, peer watch, torch's completion threads) still use what they destroy, and the
// rank crashes or hangs instead (and reports status 1, not the signal). A real crash is caught by a handler that is
// not async-signal-safe. libinfinipath skips the handler when IPATH_NO_BACKTRACE is set before it loads (the torch
// binding sets it before importing the library); for every other program this runs after the libraries libhiercoll
// depends on were initialised, and again once libfabric was loaded (libfabric.cpp), and gives each such signal back
// its default disposition.
#include <dlfcn.h>
#include <signal.h>

#include <cstring>
#include <initializer_list>

#include "transport/fabric/libfabric.hpp"

namespace hiercoll::transport {
namespace {

// The libraries whose handlers are taken out, by file name.
bool foreign(const char* file) {
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  return std::strncmp(base, "libinfinipath", std::strlen("libinfinipath")) == 0;
}

}  // namespace

void restore_default_dispositions() {
  for (int sig : {SIGINT, SIGQUIT, SIGILL, SIGABRT, SIGBUS, SIGFPE, SIGSEGV, SIGTERM}) {
    struct sigaction current {};
    if (sigaction(sig, nullptr, &current) != 0) continue;
    void* handler = (current.sa_flags & SA_SIGINFO) ? reinterpret_cast<void*>(current.sa_sigaction)
                                                    : reinterpret_cast<void*>(current.sa_handler);
    if (current.sa_handler == SIG_DFL || current.sa_handler == SIG_IGN) continue;
    Dl_info info{};
    if (dladdr(handler, &info) == 0 || info.dli_fname == nullptr || !foreign(info.dli_fname)) continue;
    struct sigaction fallback {};
    fallback.sa_handler = SIG_DFL;
    sigemptyset(&fallback.sa_mask);
    sigaction(sig, &fallback, nullptr);
  }
}

namespace {
// For a libinfinipath loaded before libhiercoll (a program that loaded libfabric itself).
__attribute__((constructor)) void restore_at_load() { restore_default_dispositions(); }
}  // namespace

}  // namespace hiercoll::transport
