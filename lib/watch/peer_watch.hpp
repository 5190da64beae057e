#pragma once
// PeerWatch: a peer process's death noticed in well under a second, whatever the operation timeout says.
//
// Rank 0 of the communicator is the hub and every other rank keeps one TCP connection to it: a star, as the store
// is, so a rank holds one socket and rank 0 one per rank. The kernel closes a process's sockets however it ends
// (a signal, a crash, an exit that never destroyed its communicator), so the hub reads end-of-file from a dead
// rank at once and tells every other rank, and every rank reads the hub's own death the same way. Gloo and the
// fabric's own connections notice the same thing, but only for the peers an operation is talking to at the time;
// this notices any rank, between operations too. What closes no socket (a host powered off, a cable pulled) is
// noticed by heartbeats on the same connections (HIERCOLL_HEARTBEAT_TIMEOUT_MS). A rank that destroys its
// communicator says goodbye first and is not reported; one that aborts is, as its peers' operations can no
// longer finish.
//
// A death is reported after a short grace (kReportGrace): a rank that ends its program right after its last
// collective has already sent what its peers still need, and they should finish with that data, not fail.
//
// Only ranks that read the communicator's store can join: the hub's contact, published there, carries a random
// token that every frame repeats. Anything else that reaches the hub's socket (stray clients, random bytes, another
// job's ranks) is dropped with a warning and changes nothing.
#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace hiercoll::watch {

class PeerWatch {
 public:
  struct Options {
    int rank = 0;
    int size = 1;
    /// A rank unheard for this long is reported (0: never; connection loss still is).
    std::chrono::milliseconds heartbeat_timeout{10000};
    /// Limit of a rank's connection to the hub at start-up.
    std::chrono::milliseconds connect_timeout{30000};
    /// HIERCOLL_SOCKET_IFNAME: the hub publishes this interface's address first.
    std::string socket_ifname;
  };
  /// The first rank that died, aborted or went silent.
  struct Loss {
    int rank;
    bool connection_closed;  ///< it died or aborted (its connection ended), rather than its heartbeats stopping
    bool gave_up;            ///< it aborted: it is alive, and failed for a reason of its own (often a timeout)
    std::string reason;      ///< names the rank and says what happened, for error messages
  };
  /// Called once, on the watch's thread.
  using OnFailure = std::function<void(const Loss& loss)>;

  /// How long after a death is noticed it is reported.
  static constexpr std::chrono::milliseconds kReportGrace{300};

  /// Rank 0: listens on every interface; publish contact() for the others.
  static std::unique_ptr<PeerWatch> hub(const Options& options, OnFailure on_failure);
  /// Every other rank: connects to the hub at `contact`, trying loopback first when `same_host`. Throws
  /// RemoteError if the hub cannot be reached (rank 0 died, or its addresses are not routable from here).
  static std::unique_ptr<PeerWatch> spoke(const Options& options, const std::string& contact, bool same_host,
                                          OnFailure on_failure);

  /// Leaves (the peers hear that this rank destroyed its communicator) unless leave() was called.
  ~PeerWatch();
  /// Stops watching. The peers hear that this rank aborted (they fail what they are doing), or that it is gone
  /// on purpose (they carry on). Idempotent; never throws.
  void leave(bool aborted);
  /// The text spokes connect with (hub only): "token port address,address,...".
  const std::string& contact() const;

  class Impl;

 private:
  explicit PeerWatch(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hiercoll::watch
