#include "algo/channel.hpp"

#include <cstdlib>
#include <thread>

#include "base/spin.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll::algo {

void* Scratch::get(size_t bytes, int which) {
  Buffer& buffer = buffers_[which];
  if (buffer.bytes < bytes) {
    release(buffer);
    size_t rounded = (bytes + 63) / 64 * 64;
    buffer.data = std::aligned_alloc(64, rounded);
    if (buffer.data == nullptr) throw SystemError("cannot allocate " + std::to_string(bytes) + " bytes of scratch");
    buffer.bytes = rounded;
    if (endpoint_) buffer.pinned = endpoint_->pin(buffer.data, buffer.bytes);
  }
  return buffer.data;
}

void Scratch::release(Buffer& buffer) {
  buffer.pinned.reset();  // its registration goes with it: no operation runs on the buffer while it is replaced
  std::free(buffer.data);
  buffer.data = nullptr;
  buffer.bytes = 0;
}

Scratch::~Scratch() {
  for (auto& buffer : buffers_) release(buffer);
}

Channel::Channel(transport::Endpoint& endpoint, const std::vector<int>& world_ranks, int my_index, uint16_t context,
                 uint16_t sequence, Clock::time_point deadline, std::string what, const AlgoConfig& config,
                 Scratch& scratch, const std::atomic<bool>& aborted)
    : endpoint_(endpoint),
      world_ranks_(world_ranks),
      my_index_(my_index),
      context_(context),
      sequence_(sequence),
      deadline_(deadline),
      what_(std::move(what)),
      config_(config),
      scratch_(scratch),
      aborted_(aborted) {}

Channel Channel::subgroup(const std::vector<int>& world_ranks, int my_index, uint32_t step_base) const {
  Channel sub(endpoint_, world_ranks, my_index, context_, sequence_, deadline_, what_, config_, scratch_, aborted_);
  sub.step_base_ = step_base_ + step_base;
  return sub;
}

namespace {

// The tag keeps 16 bits of the step, so steps wrap modulo 65536, on purpose: an operation may number more steps than
// that (the hierarchical allreduce gives each piece its own range, and a message of tens of GB has thousands of
// pieces). Two steps that wrap onto one tag are 65536 apart; if both are in flight at once (a ring posts all its
// first step's sends together), they still pair up right, because every algorithm posts its sends and receives to
// a peer in step order and the transport matches one tag's messages between two ranks in the order sent.
// Tested by the [wrap] in-process tests; docs/design.md "Tags" gives every field's limit.
uint16_t wrapped(uint32_t step) { return static_cast<uint16_t>(step & 0xffffu); }

// The longest a waiting thread sleeps in the endpoint before it looks at its deadline and the abort flag itself.
constexpr std::chrono::milliseconds kLongestSleep{50};

}  // namespace

RequestPtr Channel::send(int peer, uint32_t step, const void* buffer, size_t bytes) {
  Tag tag = collective_tag(context_, world_rank(my_index_), sequence_, wrapped(step_base_ + step));
  return endpoint_.isend(world_rank(peer), tag, buffer, bytes);
}

RequestPtr Channel::recv(int peer, uint32_t step, void* buffer, size_t bytes) {
  Tag tag = collective_tag(context_, world_rank(peer), sequence_, wrapped(step_base_ + step));
  return endpoint_.irecv(world_rank(peer), tag, 0, buffer, bytes);
}

void Channel::wait(const RequestPtr& request) {
  wait_request(endpoint_, request, request->peer, deadline_, what_, aborted_);
}

void Channel::wait_all(std::vector<RequestPtr>& requests) {
  for (auto& request : requests) wait(request);
  requests.clear();
}

void check_request(const transport::Request& request, int world_peer, const std::string& what) {
  std::string peer = world_peer < 0 ? "any rank" : "rank " + std::to_string(world_peer);
  if (request.state.load() == transport::Request::State::kFailed) {
    throw RemoteError(what + ": " + (request.is_send ? "send to " : "receive from ") + peer +
                      " failed: " + request.error);
  }
  if (!request.is_send && request.bytes_done != request.bytes_posted) {
    throw InvalidUsageError(what + ": " + peer + " sent " + std::to_string(request.bytes_done) + " bytes where " +
                            std::to_string(request.bytes_posted) +
                            " were expected (ranks called this operation with different counts or types)");
  }
}

void wait_request(transport::Endpoint& endpoint, const RequestPtr& request, int world_peer, Clock::time_point deadline,
                  const std::string& what, const std::atomic<bool>& aborted) {
  // Spin briefly while replies have lately come within microseconds, then sleep in the provider between completions.
  thread_local base::AdaptiveSpin spin{std::chrono::microseconds(50)};
  if (request->done()) return check_request(*request, world_peer, what);
  const auto started = Clock::now();
  const auto spin_until = started + spin.budget();
  while (!request->done()) {
    auto now = Clock::now();
    if (aborted.load(std::memory_order_relaxed)) throw RemoteError(what + ": the communicator was aborted");
    if (now >= deadline) {
      throw TimeoutError(what + ": timed out waiting " + (request->is_send ? "to send to" : "for data from") +
                         " rank " + std::to_string(world_peer) + " (is it alive, and did it call the same operation?)");
    }
    if (now >= spin_until) {
      // Asleep until data comes, the deadline passes, or the communicator halts (halt() wakes the endpoint, and the
      // abort test above then sees the flag). Short slices cost CPU in wake-ups alone while a peer is late (the
      // wait budget, docs/benchmarks.md, "What waiting costs"); kLongestSleep bounds what a lost wake-up could cost.
      endpoint.progress(std::chrono::duration_cast<std::chrono::microseconds>(
          std::min<Clock::duration>(kLongestSleep, deadline - now)));
      continue;
    }
    endpoint.progress(std::chrono::microseconds(0));
    // Past the first microseconds, each poll also gives the core up: a rank that polls the network on a core its
    // peer needs (more ranks than cores) would otherwise hold it for the whole spin.
    if (now - started > base::kPollOnly) std::this_thread::yield();
  }
  spin.record(Clock::now() - started);
  check_request(*request, world_peer, what);
}

}  // namespace hiercoll::algo
