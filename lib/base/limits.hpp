#pragma once
// Process limits a communicator depends on. Rank 0 holds a socket per rank twice over (the store it serves and the
// peer watch's hub), and a connection-oriented provider (tcp;ofi_rxm) one per peer it talks to: under the usual
// soft limit of 1,024 descriptors, accept() starts failing at about 500 ranks. Like mpirun and torchrun, hiercoll
// raises the soft limit to the hard one.
#include <cstddef>
#include <string>

namespace hiercoll::base {

/// Raises RLIMIT_NOFILE's soft limit to its hard limit (once per process; thread-safe) and returns the soft limit
/// now in force. Never throws: where the limit cannot be read or raised, returns what it is.
size_t raise_descriptor_limit();

/// Raises the limit, then throws SystemError if it is still below `needed`, naming the limit, the number needed and
/// `why` ("rank 0 of 2048 ranks: ...").
void require_descriptors(size_t needed, const std::string& why);

}  // namespace hiercoll::base
