#include "transport/striped_endpoint.hpp"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/text.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll::transport {
namespace {

// The published address: one byte, the rail count K (1..255), then each rail's address as a 4-byte length (host
// order: the ranks of a job share an architecture) and its bytes.
std::vector<uint8_t> encode(const std::vector<std::vector<uint8_t>>& addresses) {
  std::vector<uint8_t> record{static_cast<uint8_t>(addresses.size())};
  for (const auto& address : addresses) {
    const auto length = static_cast<uint32_t>(address.size());
    const auto* bytes = reinterpret_cast<const uint8_t*>(&length);
    record.insert(record.end(), bytes, bytes + sizeof length);
    record.insert(record.end(), address.begin(), address.end());
  }
  return record;
}

std::vector<std::vector<uint8_t>> decode(const std::vector<uint8_t>& record, int rank) {
  auto bad = [&](const std::string& why) {
    return InvalidUsageError("fabric: rank " + std::to_string(rank) + "'s address record (" +
                             std::to_string(record.size()) + " bytes) " + why +
                             ": every rank must run the same hiercoll and provider");
  };
  if (record.empty() || record[0] == 0) throw bad("names no rail");
  std::vector<std::vector<uint8_t>> addresses;
  size_t at = 1;
  for (int rail = 0; rail < record[0]; ++rail) {
    uint32_t length = 0;
    if (record.size() - at < sizeof length) throw bad("ends inside rail " + std::to_string(rail) + "'s length");
    std::memcpy(&length, record.data() + at, sizeof length);
    at += sizeof length;
    if (record.size() - at < length) throw bad("ends inside rail " + std::to_string(rail) + "'s address");
    addresses.emplace_back(record.begin() + static_cast<std::ptrdiff_t>(at),
                           record.begin() + static_cast<std::ptrdiff_t>(at + length));
    at += length;
  }
  if (at != record.size()) throw bad("has " + std::to_string(record.size() - at) + " bytes past its last rail");
  return addresses;
}

}  // namespace

// A request cut in parts: done when every part is, failed when any is.
struct StripedEndpoint::Cut : Request {
  std::vector<RequestPtr> parts;  // part j on rail route.rail(j)
  Route route;
};

StripedEndpoint::StripedEndpoint(std::vector<std::unique_ptr<Endpoint>> rails, size_t min_part_bytes)
    : rails_(std::move(rails)), min_part_bytes_(std::max<size_t>(1, min_part_bytes)) {
  if (rails_.empty() || rails_.size() > 255) {
    throw InvalidUsageError("StripedEndpoint: " + std::to_string(rails_.size()) + " rails (1 to 255)");
  }
  wake_fd_ = base::UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_fd_.valid()) throw SystemError(std::string("striped endpoint: eventfd: ") + std::strerror(errno));
}

StripedEndpoint::~StripedEndpoint() = default;

std::string StripedEndpoint::domain() const {
  std::string names;
  for (const auto& rail : rails_) base::append_listed(names, rail->domain(), ",");
  return names;
}

std::string StripedEndpoint::host_of(const std::vector<uint8_t>& address) const {
  try {
    return rails_.front()->host_of(decode(address, -1).front());
  } catch (const InvalidUsageError&) {
    return {};  // connect() reports it, naming the rank
  }
}

std::vector<uint8_t> StripedEndpoint::address() const {
  std::vector<std::vector<uint8_t>> addresses;
  for (const auto& rail : rails_) addresses.push_back(rail->address());
  return encode(addresses);
}

// Rail j of this rank reaches rail j of each peer that has one; for a peer with fewer rails it is given that peer's
// rail j mod K' (a valid address of the peer's, which the providers check), and sends nothing there: parts() never
// cuts a message to a peer into more parts than it has rails.
void StripedEndpoint::connect(int my_rank, const std::vector<std::vector<uint8_t>>& addresses) {
  std::vector<std::vector<std::vector<uint8_t>>> records;
  peer_rails_.clear();
  for (size_t r = 0; r < addresses.size(); ++r) {
    records.push_back(decode(addresses[r], static_cast<int>(r)));
    peer_rails_.push_back(static_cast<uint8_t>(records.back().size()));
  }
  for (size_t j = 0; j < rails_.size(); ++j) {
    std::vector<std::vector<uint8_t>> rail_addresses;
    for (const auto& record : records) rail_addresses.push_back(record[j % record.size()]);
    rails_[j]->connect(my_rank, rail_addresses);
  }
}

StripedEndpoint::Route StripedEndpoint::route(int peer, Tag tag, size_t bytes) const {
  if (rails_.size() == 1 || peer < 0 || (tag & kWholeMessageBit) != 0) return {};
  const size_t shared = std::min<size_t>(rails_.size(), peer_rails_.at(static_cast<size_t>(peer)));
  return {static_cast<size_t>(tag % shared), std::max<size_t>(1, std::min(shared, bytes / min_part_bytes_)), shared};
}

RequestPtr StripedEndpoint::isend(int peer, Tag tag, const void* buffer, size_t bytes) {
  const Route to = route(peer, tag, bytes);
  if (to.parts == 1) return rails_[to.first]->isend(peer, tag, buffer, bytes);
  return cut(true, peer, tag, static_cast<uint8_t*>(const_cast<void*>(buffer)), bytes, to);
}

RequestPtr StripedEndpoint::irecv(int peer, Tag tag, Tag ignore, void* buffer, size_t bytes) {
  const Route from = ignore == 0 ? route(peer, tag, bytes) : Route{};
  if (from.parts == 1) return rails_[from.first]->irecv(peer, tag, ignore, buffer, bytes);
  return cut(false, peer, tag, static_cast<uint8_t*>(buffer), bytes, from);
}

// Part j spans [bytes * j / n, bytes * (j + 1) / n), each boundary rounded down to 64 bytes (a cache line: the
// providers copy parts in and out of bounce buffers), and goes on rail route.rail(j); sender and receiver
// compute the same.
RequestPtr StripedEndpoint::cut(bool is_send, int peer, Tag tag, uint8_t* buffer, size_t bytes, Route route) {
  auto request = std::make_shared<Cut>();
  request->is_send = is_send;
  request->peer = peer;
  request->tag = tag;
  request->bytes_posted = bytes;
  request->route = route;
  const size_t n = route.parts;
  auto boundary = [&](size_t j) { return j == n ? bytes : (bytes / n * j + bytes % n * j / n) & ~size_t{63}; };
  for (size_t j = 0; j < n; ++j) {
    const size_t begin = boundary(j), end = boundary(j + 1);
    Endpoint& rail = *rails_[route.rail(j)];
    request->parts.push_back(is_send ? rail.isend(peer, tag, buffer + begin, end - begin)
                                     : rail.irecv(peer, tag, 0, buffer + begin, end - begin));
  }
  cuts_.push_back(request);
  settle();  // a part may have failed at once (a closed rail)
  return request;
}

// Completes the cut requests whose parts are all done, and fails those with a part failed or short: a short part
// means the sender cut another size (the ranks disagree on the operation), and its other parts may never come.
bool StripedEndpoint::settle() {
  bool any = false;
  for (size_t i = 0; i < cuts_.size();) {
    Cut& request = *cuts_[i];
    std::string error;
    bool all_done = true;
    size_t bytes = 0;
    for (size_t j = 0; j < request.parts.size() && error.empty(); ++j) {
      const Request& part = *request.parts[j];
      if (!part.done()) {
        all_done = false;
        continue;
      }
      if (part.state.load(std::memory_order_acquire) == Request::State::kFailed) {
        const size_t rail = request.route.rail(j);
        error = part.error + " (part " + std::to_string(j + 1) + " of " + std::to_string(request.parts.size()) +
                ", on " + rails_[rail]->domain() + ")";
      } else if (!part.is_send && part.bytes_done != part.bytes_posted) {
        error = "message size mismatch: part " + std::to_string(j + 1) + " of " +
                std::to_string(request.parts.size()) + " of a " + std::to_string(request.bytes_posted) +
                "-byte receive got " + std::to_string(part.bytes_done) + " bytes of its " +
                std::to_string(part.bytes_posted) + " (ranks disagree on the size of this operation)";
      }
      bytes += part.bytes_done;
    }
    if (error.empty() && !all_done) {
      ++i;
      continue;
    }
    if (error.empty()) {
      request.bytes_done = bytes;
      request.tag = request.parts.front()->tag;
      request.source = request.parts.front()->source;
    } else {
      request.error = error;
    }
    request.state.store(error.empty() ? Request::State::kDone : Request::State::kFailed, std::memory_order_release);
    cuts_[i] = std::move(cuts_.back());
    cuts_.pop_back();
    any = true;
  }
  return any;
}

std::shared_ptr<const void> StripedEndpoint::pin(const void* buffer, size_t bytes) {
  if (rails_.size() == 1) return rails_.front()->pin(buffer, bytes);
  auto pins = std::make_shared<std::vector<std::shared_ptr<const void>>>();
  for (auto& rail : rails_) {
    if (auto pinned = rail->pin(buffer, bytes)) pins->push_back(std::move(pinned));
  }
  if (pins->empty()) return nullptr;
  return pins;
}

Endpoint::Stats StripedEndpoint::stats() const {
  Stats sum;
  for (const auto& rail : rails_) {
    const Stats one = rail->stats();
    sum.registrations_made += one.registrations_made;
    sum.registrations_held += one.registrations_held;
    sum.addresses_inserted += one.addresses_inserted;
  }
  return sum;
}

bool StripedEndpoint::progress(std::chrono::microseconds max_block) {
  if (rails_.size() == 1) return rails_.front()->progress(max_block);
  const auto deadline = std::chrono::steady_clock::now() + max_block;
  std::vector<pollfd> fds;
  std::vector<bool> drain;
  for (;;) {
    bool any = false;
    for (auto& rail : rails_) any = rail->progress(std::chrono::microseconds(0)) || any;
    any = settle() || any;
    if (any) return true;
    const auto now = std::chrono::steady_clock::now();
    if (max_block.count() <= 0 || now >= deadline) return false;

    auto within = std::chrono::duration_cast<std::chrono::microseconds>(deadline - now);
    fds.assign(1, pollfd{wake_fd_.get(), POLLIN, 0});
    drain.assign(1, true);
    for (auto& rail : rails_) {
      const WaitHint hint = rail->wait_hint();
      within = std::min(within, hint.within);
      if (hint.fd >= 0) {
        fds.push_back(pollfd{hint.fd, POLLIN, 0});
        drain.push_back(hint.drain);
      }
    }
    if (within.count() <= 0) {
      sched_yield();  // a rail is mid-transfer on a manual-progress provider: poll on, giving the core up between
      continue;
    }
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(within.count() / 1000000);
    ts.tv_nsec = static_cast<long>((within.count() % 1000000) * 1000);
    if (ppoll(fds.data(), fds.size(), &ts, nullptr) <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (drain[i] && (fds[i].revents & POLLIN) != 0) {
        uint64_t count;
        if (::read(fds[i].fd, &count, sizeof count) < 0) {
        }  // drained already; a failed read leaves it readable, which only ends the next sleep at once
      }
    }
    if ((fds[0].revents & POLLIN) != 0) return true;  // wake(): the caller looks at its flags
  }
}

// A striped endpoint is not itself striped; where one is driven beside others, with several rails it asks to be
// polled.
Endpoint::WaitHint StripedEndpoint::wait_hint() {
  if (rails_.size() == 1) return rails_.front()->wait_hint();
  WaitHint hint;
  hint.within = std::chrono::microseconds(0);
  return hint;
}

void StripedEndpoint::wake() {
  if (rails_.size() == 1) return rails_.front()->wake();  // progress() sleeps in the rail itself
  const uint64_t one = 1;
  if (::write(wake_fd_.get(), &one, sizeof one) < 0) {
  }  // the counter is saturated: a wake is pending anyway
}

void StripedEndpoint::cancel_all(const std::string& reason) {
  for (auto& rail : rails_) rail->cancel_all(reason);
  settle();
  // Every rail finished its requests above (the contract); a cut whose parts all completed before is done by now,
  // and none is left pending.
  for (auto& request : cuts_) {
    request->error = reason;
    request->state.store(Request::State::kFailed, std::memory_order_release);
  }
  cuts_.clear();
}

void StripedEndpoint::quiesce(std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (auto& rail : rails_) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    rail->quiesce(std::max(left, std::chrono::milliseconds(0)));
  }
}

}  // namespace hiercoll::transport
