#pragma once
// The provider "unix": hiercoll's own endpoint between the ranks of one host, over Unix-domain stream sockets, for
// the hosts where no libfabric loads (a wheel installed where the distribution's libfabric1 is not, a container
// without the EFA installer). There the collectives still run through the node's shared memory (shm/node_arena.hpp);
// this endpoint carries what needs point-to-point messages: send/recv, alltoall, reduce, the flat schedules, the
// control messages. As NCCL falls back to its own sockets where no network plugin loads, but only inside one host:
// a job across hosts with no libfabric fails, naming what to install (libfabric.hpp), rather than run its network
// phase on a path nobody chose.
//
// Each rank listens on an abstract-namespace name the kernel picks (autobind: unique, no file to remove, and one
// namespace per network namespace, so emulated nodes cannot reach each other's). A rank connects to a peer the first
// time it sends to it and says who it is; each direction of a pair is a stream of its own, so a pair's messages
// arrive in sending order and neither side decides who connects. A peer whose process ends closes its sockets, which
// fails at once what this rank posted to or from it.
//
// Threads and blocking: the Endpoint contract (transport.hpp); progress() sleeps in epoll.
#include <memory>

#include "transport/transport.hpp"

namespace hiercoll::transport {

/// Throws SystemError where the listening socket cannot be made.
std::unique_ptr<Endpoint> open_unix_endpoint();

}  // namespace hiercoll::transport
