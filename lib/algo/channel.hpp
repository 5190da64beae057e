#pragma once
// A Channel is one operation's view of a group of ranks: it numbers the group 0..size-1, maps those to
// world ranks, stamps every message with a tag unique to (communicator, operation, sender, step), and
// turns every wait into one bounded by the operation's deadline with an error naming the peer.
//
// Tag layout (64 bits):  [63..48] communicator context  [47] point-to-point  [46..32] sender's world rank
//                        [31..16] operation sequence    [15..0] step within the operation
// Point-to-point messages put the user's 32-bit tag in [31..0] instead; their bit 47 is transport::kWholeMessageBit
// (a receive may be posted larger than the message), which collective messages leave clear.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/transport.hpp"

namespace hiercoll::algo {

using Clock = std::chrono::steady_clock;
using transport::RequestPtr;
using transport::Tag;

inline constexpr int kMaxWorldRanks = 1 << 15;

inline Tag collective_tag(uint16_t context, int source, uint16_t sequence, uint16_t step) {
  return (static_cast<Tag>(context) << 48) | (static_cast<Tag>(source) << 32) | (static_cast<Tag>(sequence) << 16) |
         step;
}
inline Tag p2p_tag(uint16_t context, int source, uint32_t user_tag) {
  return (static_cast<Tag>(context) << 48) | transport::kWholeMessageBit | (static_cast<Tag>(source) << 32) | user_tag;
}
inline int tag_source(Tag tag) { return static_cast<int>((tag >> 32) & 0x7fff); }
/// The bits of a p2p tag that hold the source rank: a receive from any source ignores them.
inline constexpr Tag kP2pSourceBits = Tag{0x7fff} << 32;

/// Tuning shared by the algorithms (HIERCOLL_CHUNK_BYTES, HIERCOLL_PIPELINE_SLOTS).
struct AlgoConfig {
  size_t chunk_bytes = 1 << 20;  ///< pipelining granularity of ring / chain algorithms
  int slots = 4;                 ///< receive buffers in flight per pipeline
};

/// Reusable scratch memory owned by the communicator (grows, never shrinks).
class Scratch {
 public:
  /// A buffer of at least `bytes`, 64-byte aligned; `which` selects one of several independent buffers.
  void* get(size_t bytes, int which = 0);
  /// Registers every buffer with `endpoint` where its provider needs registered memory (Endpoint::pin), once per
  /// allocation and for its life, instead of every message's piece of it; the endpoint must outlive this Scratch.
  void pin_with(transport::Endpoint* endpoint) { endpoint_ = endpoint; }
  ~Scratch();

 private:
  struct Buffer {
    void* data = nullptr;
    size_t bytes = 0;
    std::shared_ptr<const void> pinned;
  };
  void release(Buffer& buffer);
  Buffer buffers_[4];
  transport::Endpoint* endpoint_ = nullptr;
};

class Channel {
 public:
  Channel(transport::Endpoint& endpoint, const std::vector<int>& world_ranks, int my_index, uint16_t context,
          uint16_t sequence, Clock::time_point deadline, std::string what, const AlgoConfig& config, Scratch& scratch,
          const std::atomic<bool>& aborted);

  int rank() const { return my_index_; }
  int size() const { return static_cast<int>(world_ranks_.size()); }
  int world_rank(int peer) const { return world_ranks_[static_cast<size_t>(peer)]; }
  const AlgoConfig& config() const { return config_; }
  Scratch& scratch() { return scratch_; }
  const std::string& what() const { return what_; }

  /// The same operation over a subgroup (`world_ranks` must outlive it). Steps are offset by `step_base`,
  /// so several sub-operations of one operation never share a tag.
  Channel subgroup(const std::vector<int>& world_ranks, int my_index, uint32_t step_base) const;
  Clock::time_point deadline() const { return deadline_; }
  const std::atomic<bool>& aborted() const { return aborted_; }

  /// Registers a buffer the operation is about to send from or receive into, where the provider needs registered
  /// memory (transport::Endpoint::pin); hold the result until the operation ends.
  std::shared_ptr<const void> pin(const void* buffer, size_t bytes) { return endpoint_.pin(buffer, bytes); }
  /// Posts a message of step `step` to group rank `peer`.
  RequestPtr send(int peer, uint32_t step, const void* buffer, size_t bytes);
  /// Posts a receive of exactly `bytes` from group rank `peer`; wait() fails if another size arrives.
  RequestPtr recv(int peer, uint32_t step, void* buffer, size_t bytes);
  /// Blocks until the request is done; throws (naming the peer and the operation) on failure or deadline.
  void wait(const RequestPtr& request);
  void wait_all(std::vector<RequestPtr>& requests);

 private:
  transport::Endpoint& endpoint_;
  const std::vector<int>& world_ranks_;
  int my_index_;
  uint16_t context_;
  uint16_t sequence_;
  uint32_t step_base_ = 0;
  Clock::time_point deadline_;
  std::string what_;
  const AlgoConfig& config_;
  Scratch& scratch_;
  const std::atomic<bool>& aborted_;
};

/// Waits for a request outside any channel (point-to-point work). Same errors as Channel::wait.
/// `aborted` turning true makes it give up at once.
void wait_request(transport::Endpoint& endpoint, const RequestPtr& request, int world_peer, Clock::time_point deadline,
                  const std::string& what, const std::atomic<bool>& aborted);
/// Throws the error a finished request carries, if any (failed, or a receive of the wrong size).
void check_request(const transport::Request& request, int world_peer, const std::string& what);

}  // namespace hiercoll::algo
