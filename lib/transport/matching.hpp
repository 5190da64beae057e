#pragma once
// Tag matching for the endpoints that match messages themselves (the memory fabric, the Unix-socket endpoint; the
// libfabric providers match their own): posted receives and unexpected messages, kept per source so that matching
// costs what one peer has pending, not what the whole world has (an alltoall posts a receive from every rank at
// once). The rule is the contract's (transport.hpp): a message goes to the first posted receive that matches it, a
// receive takes the first arrived message that matches it. Receives from any source and arrivals carry a sequence
// number to tell which came first across the per-source lists.
//
// Message: the endpoint's held message, with `int source` and `Tag tag`.
// Not thread-safe: the owner's lock or driver thread guards it.
#include <algorithm>
#include <cstring>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "transport/transport.hpp"

namespace hiercoll::transport {

/// A request of an endpoint that matches its own receives.
struct MatchedRequest : Request {
  void* buffer = nullptr;  ///< receives: where the message goes
  Tag ignore = 0;          ///< receives: tag bits that need not match

  static std::shared_ptr<MatchedRequest> send(int peer, Tag tag, size_t bytes) {
    auto request = std::make_shared<MatchedRequest>();
    request->is_send = true;
    request->peer = peer;
    request->tag = tag;
    request->bytes_posted = bytes;
    return request;
  }
  static std::shared_ptr<MatchedRequest> receive(int peer, Tag tag, Tag ignore, void* buffer, size_t bytes) {
    auto request = send(peer, tag, bytes);
    request->is_send = false;
    request->buffer = buffer;
    request->ignore = ignore;
    return request;
  }
};

inline void complete_request(Request& request, size_t bytes) {
  request.bytes_done = bytes;
  request.state.store(Request::State::kDone, std::memory_order_release);
}

inline void fail_request(Request& request, const std::string& why) {
  if (request.done()) return;
  request.error = why;
  request.state.store(Request::State::kFailed, std::memory_order_release);
}

inline std::string truncation_error(size_t bytes, size_t posted) {
  return "message of " + std::to_string(bytes) + " bytes truncated to the " + std::to_string(posted) + " posted";
}

/// Completes `receive` with a whole message the endpoint held: copied into its buffer, or failed where the message is
/// larger than the receive (as libfabric reports truncation).
inline void deliver(MatchedRequest& receive, int source, Tag tag, const std::vector<uint8_t>& data) {
  receive.source = source;
  receive.tag = tag;
  if (data.size() > receive.bytes_posted) {
    fail_request(receive, truncation_error(data.size(), receive.bytes_posted));
    return;
  }
  if (!data.empty()) std::memcpy(receive.buffer, data.data(), data.size());
  complete_request(receive, data.size());
}

inline bool tag_matches(const MatchedRequest& receive, int source, Tag tag) {
  return (receive.peer < 0 || receive.peer == source) && ((receive.tag ^ tag) & ~receive.ignore) == 0;
}

template <class Message>
struct TagMatching {
  using Receive = MatchedRequest;
  struct Posted {
    std::shared_ptr<Receive> request;
    uint64_t sequence;
  };
  struct Arrived {
    Message message;
    uint64_t sequence;
  };
  std::unordered_map<int, std::list<Posted>> receives;  // by source
  std::list<Posted> receives_from_any;
  std::unordered_map<int, std::list<Arrived>> unexpected;  // by source
  uint64_t next_sequence = 0;

  /// The first posted receive matching a message from `source` with `tag`, taken out; null if none.
  std::shared_ptr<Receive> take_receive(int source, Tag tag) {
    auto matching = [&](const Posted& p) { return tag_matches(*p.request, source, tag); };
    std::list<Posted>* directed = nullptr;
    typename std::list<Posted>::iterator first_directed;
    auto peer = receives.find(source);
    if (peer != receives.end()) {
      first_directed = std::find_if(peer->second.begin(), peer->second.end(), matching);
      if (first_directed != peer->second.end()) directed = &peer->second;
    }
    auto first_any = std::find_if(receives_from_any.begin(), receives_from_any.end(), matching);
    const bool any = first_any != receives_from_any.end();
    if (!directed && !any) return nullptr;
    std::shared_ptr<Receive> taken;
    if (directed && (!any || first_directed->sequence < first_any->sequence)) {
      taken = std::move(first_directed->request);
      directed->erase(first_directed);
      if (directed->empty()) receives.erase(peer);
    } else {
      taken = std::move(first_any->request);
      receives_from_any.erase(first_any);
    }
    return taken;
  }

  /// The first arrived message matching `request`, taken out into `out`; false if none.
  bool take_unexpected(const Receive& request, Message& out) {
    auto first_in = [&](std::list<Arrived>& arrived) {
      return std::find_if(arrived.begin(), arrived.end(), [&](const Arrived& a) {
        return tag_matches(request, a.message.source, a.message.tag);
      });
    };
    auto best_source = unexpected.end();
    typename std::list<Arrived>::iterator best;
    auto consider = [&](typename std::unordered_map<int, std::list<Arrived>>::iterator source) {
      auto it = first_in(source->second);
      if (it != source->second.end() && (best_source == unexpected.end() || it->sequence < best->sequence)) {
        best_source = source;
        best = it;
      }
    };
    if (request.peer >= 0) {
      auto source = unexpected.find(request.peer);
      if (source != unexpected.end()) consider(source);
    } else {
      for (auto source = unexpected.begin(); source != unexpected.end(); ++source) consider(source);
    }
    if (best_source == unexpected.end()) return false;
    out = std::move(best->message);
    best_source->second.erase(best);
    if (best_source->second.empty()) unexpected.erase(best_source);
    return true;
  }

  void post(std::shared_ptr<Receive> request) {
    auto& list = request->peer < 0 ? receives_from_any : receives[request->peer];
    list.push_back({std::move(request), next_sequence++});
  }
  void arrive(Message message) {
    const int source = message.source;
    unexpected[source].push_back({std::move(message), next_sequence++});
  }
  /// Takes out every posted receive from `source` and hands each to `fail`.
  template <class Fail>
  void fail_receives_from(int source, Fail&& fail) {
    auto peer = receives.find(source);
    if (peer == receives.end()) return;
    std::list<Posted> taken = std::move(peer->second);
    receives.erase(peer);
    for (auto& p : taken) fail(*p.request);
  }
  /// Takes out every posted receive and hands each to `fail`.
  template <class Fail>
  void fail_receives(Fail&& fail) {
    auto taken = std::move(receives);
    auto from_any = std::move(receives_from_any);
    receives.clear();
    receives_from_any.clear();
    for (auto& [source, list] : taken) {
      for (auto& p : list) fail(*p.request);
    }
    for (auto& p : from_any) fail(*p.request);
  }
};

}  // namespace hiercoll::transport
