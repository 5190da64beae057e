#pragma once
// An in-process fabric: N endpoints in one process, each driven by its own thread (one emulated rank), that
// exchange tagged messages through memory under the same contract as the libfabric endpoint (transport.hpp).
// It exists for tests: the algorithms run on 1..64 emulated ranks in seconds, and faults are injected
// deterministically from a seed (MemoryFabric), and whole communicators run as threads of one process at thousands of
// ranks (open_memory_endpoint, the provider "memory"). A MemoryFabric's faults:
//   - delay: each message is delivered a random 0..max_delay after it was sent, so ranks drift apart;
//   - reorder: with a delay, messages between one pair of ranks overtake each other (the contract only keeps
//     the order of messages with the same tag); without it, each pair's messages arrive in sending order;
//   - kill(rank): the rank dies. Its endpoint fails everything it has posted and refuses new work; what it
//     had in flight is lost; sends to it never complete and receives from it never match, as with a peer whose
//     host went away, so its peers find out through their deadlines (TimeoutError naming the rank).
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "transport/transport.hpp"

namespace hiercoll::transport {

struct MemoryFaults {
  uint64_t seed = 1;
  std::chrono::microseconds max_delay{0};  ///< 0: delivered at once
  bool reorder = false;                    ///< with max_delay: a pair's messages may overtake each other
};

class MemoryFabric {
 public:
  explicit MemoryFabric(int ranks, MemoryFaults faults = {});
  ~MemoryFabric();
  MemoryFabric(const MemoryFabric&) = delete;
  MemoryFabric& operator=(const MemoryFabric&) = delete;

  int size() const;
  /// Rank `rank`'s endpoint (once per rank). The fabric must outlive it.
  std::unique_ptr<Endpoint> endpoint(int rank);
  /// Rank `rank` dies now (any thread may call this).
  void kill(int rank);
  /// Messages sent so far (tests check that faults were exercised).
  uint64_t messages_sent() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

/// The provider "memory": an endpoint of the process-wide memory fabric, for communicators whose ranks are threads of
/// this process (tests, and emulating thousands of ranks on one host). Its address names this process and the
/// endpoint; connect() finds its peers' endpoints by those and refuses an address from another process. No faults
/// are injected; closing an endpoint is its rank dying (MemoryFabric::kill without the failed sends).
std::unique_ptr<Endpoint> open_memory_endpoint();

}  // namespace hiercoll::transport
