#pragma once
// One rank's endpoints on several NICs (its rails), seen as one endpoint: where a node has more NICs near a rank than
// ranks to share them (one rank per node with 4 NICs; p5's 8 ranks with 32), the rank takes a share of them
// (fabric/nic_choice.hpp's rule 4) and every large collective message is cut over them.
//
// Routing: between two ranks with K and K' rails a collective message uses the S = min(K, K') rails both have. It
// goes in P = min(S, bytes / min_part) parts (at least one), part j from this rank's rail r = (tag + j) mod S to the
// peer's rail r, each posted at its offset of the caller's buffer, so that the parts land in place and the message is
// whole when its last part is. A message too small to cut goes whole on rail tag mod S: a pipeline's small chunks
// (over tcp's RxM, its 16 KB eager size) take consecutive steps, so consecutive rails. Sender and receiver route
// alike because both know both rail counts (the published address lists a rank's rails), the tag, and the size: a
// collective's receive is posted for exactly the bytes sent (transport.hpp's kWholeMessageBit). Messages with that
// bit and receives from any source go whole on rail 0, which every rank has; one tag always takes the same rails, so
// messages with the same tag keep their order. Ranks that disagree on a message's size fail its receive (a truncated
// part or a short one) or time out on it (a part on a rail where none was sent), as with one rail.
//
// A request cut in parts completes when its last part does and fails when any part fails, at once, with that part's
// error (a NIC's connection lost is reported, not waited out); cancel_all() cancels every rail's requests.
//
// Waiting: progress(0) polls every rail; a blocking progress() sleeps in ppoll on the rails' wait hints
// (transport.hpp's wait_hint: the CQ fds, the keepers' eventfds) and its own wake eventfd, for the shortest time any
// rail asks to be polled within (zero while a manual-progress rail is mid-transfer: it polls, yielding). With one rail
// every call goes straight to it.
//
// Threads: the Endpoint contract; the rails are driven only from the thread that drives this endpoint.
#include <cstddef>
#include <memory>
#include <vector>

#include "base/unique_fd.hpp"
#include "transport/transport.hpp"

namespace hiercoll::transport {

class StripedEndpoint final : public Endpoint {
 public:
  /// `rails`: at least one, rail 0 the one that carries whole messages.
  StripedEndpoint(std::vector<std::unique_ptr<Endpoint>> rails, size_t min_part_bytes);
  ~StripedEndpoint() override;

  std::string provider() const override { return rails_.front()->provider(); }
  size_t eager_bytes() const override { return rails_.front()->eager_bytes(); }
  /// The rails' domains, comma-separated.
  std::string domain() const override;
  std::string host_of(const std::vector<uint8_t>& address) const override;
  /// Every rail's address, in rail order (the record format: striped_endpoint.cpp).
  std::vector<uint8_t> address() const override;
  /// Throws InvalidUsageError for a record that is not a striped endpoint's.
  void connect(int my_rank, const std::vector<std::vector<uint8_t>>& addresses) override;

  RequestPtr isend(int peer, Tag tag, const void* buffer, size_t bytes) override;
  RequestPtr irecv(int peer, Tag tag, Tag ignore, void* buffer, size_t bytes) override;
  std::shared_ptr<const void> pin(const void* buffer, size_t bytes) override;
  /// The rails' counters, summed.
  Stats stats() const override;
  bool progress(std::chrono::microseconds max_block) override;
  WaitHint wait_hint() override;
  void wake() override;
  void cancel_all(const std::string& reason) override;
  void quiesce(std::chrono::milliseconds limit) override;

  size_t rails() const { return rails_.size(); }
  /// Where a message of `bytes` to or from `peer` goes: `parts` parts (1: whole), part j on rail (first + j) mod the
  /// rails both have. After connect().
  struct Route {
    size_t first = 0;
    size_t parts = 1;
    size_t shared = 1;  ///< the rails both ranks have
    size_t rail(size_t part) const { return (first + part) % shared; }
  };
  Route route(int peer, Tag tag, size_t bytes) const;

 private:
  struct Cut;
  RequestPtr cut(bool is_send, int peer, Tag tag, uint8_t* buffer, size_t bytes, Route route);
  bool settle();

  std::vector<std::unique_ptr<Endpoint>> rails_;
  size_t min_part_bytes_;
  std::vector<uint8_t> peer_rails_;  // by rank: its rail count, from its address (connect)
  std::vector<std::shared_ptr<Cut>> cuts_;  // requests cut in parts, not yet settled; driver thread
  base::UniqueFd wake_fd_;
};

}  // namespace hiercoll::transport
