// StripedEndpoint (transport/striped_endpoint.hpp) over rails of the memory provider: which messages are cut, over how
// many rails, that the parts land in place, that ranks with different rail counts agree, and that a wait on several
// rails sleeps instead of spinning.
#include <catch2/catch.hpp>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "hiercoll/errors.hpp"
#include "transport/memory/memory_fabric.hpp"
#include "transport/striped_endpoint.hpp"

using hiercoll::InvalidUsageError;
using hiercoll::transport::Endpoint;
using hiercoll::transport::kWholeMessageBit;
using hiercoll::transport::open_memory_endpoint;
using hiercoll::transport::Request;
using hiercoll::transport::RequestPtr;
using hiercoll::transport::StripedEndpoint;
using hiercoll::transport::Tag;

namespace {

constexpr size_t kMinPart = 64 << 10;

// A rail that counts the bytes sent on it; everything else goes to the memory endpoint inside.
class CountingRail final : public Endpoint {
 public:
  explicit CountingRail(std::shared_ptr<std::atomic<size_t>> sent) : inner_(open_memory_endpoint()), sent_(sent) {}
  std::string provider() const override { return inner_->provider(); }
  std::vector<uint8_t> address() const override { return inner_->address(); }
  void connect(int rank, const std::vector<std::vector<uint8_t>>& addresses) override { inner_->connect(rank, addresses); }
  RequestPtr isend(int peer, Tag tag, const void* buffer, size_t bytes) override {
    *sent_ += bytes;
    return inner_->isend(peer, tag, buffer, bytes);
  }
  RequestPtr irecv(int peer, Tag tag, Tag ignore, void* buffer, size_t bytes) override {
    return inner_->irecv(peer, tag, ignore, buffer, bytes);
  }
  bool progress(std::chrono::microseconds max_block) override { return inner_->progress(max_block); }
  WaitHint wait_hint() override { return inner_->wait_hint(); }
  void wake() override { inner_->wake(); }
  void cancel_all(const std::string& reason) override { inner_->cancel_all(reason); }

 private:
  std::unique_ptr<Endpoint> inner_;
  std::shared_ptr<std::atomic<size_t>> sent_;
};

struct Rank {
  std::unique_ptr<StripedEndpoint> endpoint;
  std::vector<std::shared_ptr<std::atomic<size_t>>> sent;  // by rail
};

// Ranks 0..n-1 with rails[r] rails each, connected.
std::vector<Rank> connected(const std::vector<int>& rails) {
  std::vector<Rank> ranks(rails.size());
  std::vector<std::vector<uint8_t>> addresses;
  for (size_t r = 0; r < rails.size(); ++r) {
    std::vector<std::unique_ptr<Endpoint>> own;
    for (int j = 0; j < rails[r]; ++j) {
      ranks[r].sent.push_back(std::make_shared<std::atomic<size_t>>(0));
      own.push_back(std::make_unique<CountingRail>(ranks[r].sent.back()));
    }
    ranks[r].endpoint = std::make_unique<StripedEndpoint>(std::move(own), kMinPart);
    addresses.push_back(ranks[r].endpoint->address());
  }
  for (size_t r = 0; r < rails.size(); ++r) ranks[r].endpoint->connect(static_cast<int>(r), addresses);
  return ranks;
}

std::vector<uint8_t> pattern(size_t bytes, uint8_t seed) {
  std::vector<uint8_t> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(i * 131 + seed + (i >> 12));
  return data;
}

// Drives both ends until both requests are done (the memory provider delivers within isend; the cut requests settle
// in progress).
void finish(Rank& a, Rank& b, const RequestPtr& x, const RequestPtr& y) {
  for (int i = 0; i < 100 && !(x->done() && y->done()); ++i) {
    a.endpoint->progress(std::chrono::microseconds(0));
    b.endpoint->progress(std::chrono::microseconds(0));
  }
}

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

TEST_CASE("a striped endpoint spreads collective messages over the rails both ranks have, and they arrive whole",
          "[striped]") {
  // Ranks with 4, 2 and 1 rails: every pair, both ways, at sizes around the cuts.
  auto ranks = connected({4, 2, 1});
  const std::vector<int> rails{4, 2, 1};
  const std::vector<size_t> sizes{0, 1000, kMinPart - 1, 2 * kMinPart, 3 * kMinPart + 77, (1 << 20) + 13, 4 << 20};
  uint8_t seed = 1;
  for (size_t a = 0; a < ranks.size(); ++a) {
    for (size_t b = 0; b < ranks.size(); ++b) {
      if (a == b) continue;
      for (size_t bytes : sizes) {
        const Tag tag = (Tag{7} << 48) | (Tag{a} << 32) | seed;
        const auto data = pattern(bytes, seed++);
        std::vector<uint8_t> got(bytes, 0xee);
        std::vector<size_t> before;
        for (auto& counter : ranks[a].sent) before.push_back(*counter);
        auto recv = ranks[b].endpoint->irecv(static_cast<int>(a), tag, 0, got.data(), bytes);
        auto send = ranks[a].endpoint->isend(static_cast<int>(b), tag, data.data(), bytes);
        finish(ranks[a], ranks[b], send, recv);
        INFO("rank " << a << " (" << rails[a] << " rails) to rank " << b << " (" << rails[b] << "), " << bytes << " B");
        REQUIRE(send->state.load() == Request::State::kDone);
        REQUIRE(recv->state.load() == Request::State::kDone);
        CHECK(recv->bytes_done == bytes);
        CHECK(recv->tag == tag);
        CHECK(got == data);
        // Parts: as many as both have rails, each at least kMinPart, on consecutive rails from tag mod S.
        const size_t shared = static_cast<size_t>(std::min(rails[a], rails[b]));
        const size_t parts = std::max<size_t>(1, std::min<size_t>(shared, bytes / kMinPart));
        const auto route = ranks[a].endpoint->route(static_cast<int>(b), tag, bytes);
        CHECK(route.parts == parts);
        CHECK(route.first == tag % shared);
        size_t total = 0;
        for (size_t j = 0; j < ranks[a].sent.size(); ++j) {
          const size_t on_rail = *ranks[a].sent[j] - before[j];
          total += on_rail;
          const bool used = (j + shared - route.first) % shared < parts && j < shared;
          if (!used) CHECK(on_rail == 0);
          if (used && bytes > 0) CHECK(on_rail + 64 >= bytes / parts);
        }
        CHECK(total == bytes);
      }
    }
  }
}

TEST_CASE("point-to-point messages and receives from any rank go whole on the first rail", "[striped]") {
  auto ranks = connected({4, 4});
  const size_t bytes = 1 << 20;
  const auto data = pattern(bytes, 3);
  std::vector<uint8_t> got(bytes + 100, 0);  // posted larger than the message: allowed point to point
  const Tag p2p = (Tag{7} << 48) | kWholeMessageBit | 42;
  auto recv = ranks[1].endpoint->irecv(0, p2p, 0, got.data(), got.size());
  auto send = ranks[0].endpoint->isend(1, p2p, data.data(), bytes);
  finish(ranks[0], ranks[1], send, recv);
  REQUIRE(recv->state.load() == Request::State::kDone);
  CHECK(recv->bytes_done == bytes);
  CHECK(std::equal(data.begin(), data.end(), got.begin()));
  CHECK(*ranks[0].sent[0] == bytes);
  CHECK(*ranks[0].sent[1] + *ranks[0].sent[2] + *ranks[0].sent[3] == 0);

  // From any rank (a wildcard receive ignores the source bits): whole too, so the sender must not cut it either.
  const Tag any = (Tag{7} << 48) | kWholeMessageBit | 43;
  std::vector<uint8_t> got_any(bytes, 0);
  auto recv_any = ranks[1].endpoint->irecv(-1, any, Tag{0x7fff} << 32, got_any.data(), bytes);
  auto send_any = ranks[0].endpoint->isend(1, any, data.data(), bytes);
  finish(ranks[0], ranks[1], send_any, recv_any);
  REQUIRE(recv_any->state.load() == Request::State::kDone);
  CHECK(recv_any->source == 0);
  CHECK(got_any == data);
}

TEST_CASE("ranks that disagree on a striped message's size get an error, not a hang", "[striped]") {
  auto ranks = connected({4, 4});
  const Tag tag = (Tag{9} << 48) | 5;
  SECTION("the message is smaller than the receive") {
    const auto data = pattern(512 << 10, 1);
    std::vector<uint8_t> got(1 << 20);
    auto recv = ranks[1].endpoint->irecv(0, tag, 0, got.data(), got.size());
    auto send = ranks[0].endpoint->isend(1, tag, data.data(), data.size());
    finish(ranks[0], ranks[1], send, recv);
    REQUIRE(recv->state.load() == Request::State::kFailed);
    CHECK_THAT(recv->error, Catch::Matchers::Contains("disagree on the size"));
  }
  SECTION("the message is larger than the receive") {
    const auto data = pattern(1 << 20, 1);
    std::vector<uint8_t> got(512 << 10);
    auto recv = ranks[1].endpoint->irecv(0, tag, 0, got.data(), got.size());
    auto send = ranks[0].endpoint->isend(1, tag, data.data(), data.size());
    finish(ranks[0], ranks[1], send, recv);
    CHECK(recv->state.load() == Request::State::kFailed);
  }
}

TEST_CASE("cancel_all fails a striped request at once, whichever of its parts are done", "[striped]") {
  auto ranks = connected({2, 2});
  const Tag tag = (Tag{9} << 48) | 6;
  std::vector<uint8_t> got(1 << 20);
  auto recv = ranks[1].endpoint->irecv(0, tag, 0, got.data(), got.size());
  ranks[1].endpoint->cancel_all("the test gave up");
  REQUIRE(recv->state.load() == Request::State::kFailed);
  CHECK_THAT(recv->error, Catch::Matchers::Contains("the test gave up"));
}

TEST_CASE("a wait on several rails sleeps until a part arrives or it is woken, and costs no CPU meanwhile",
          "[striped]") {
  auto ranks = connected({3, 3});
  const Tag tag = (Tag{9} << 48) | 7;
  const auto data = pattern(3 * kMinPart, 2);
  std::vector<uint8_t> got(data.size());
  auto recv = ranks[1].endpoint->irecv(0, tag, 0, got.data(), got.size());
  REQUIRE(ranks[1].endpoint->route(0, tag, data.size()).parts == 3);

  // Nothing comes for 300 ms: the wait sleeps through it.
  const double cpu_before = cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(ranks[1].endpoint->progress(std::chrono::milliseconds(300)));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(waited >= 0.29);
  CHECK(cpu_seconds() - cpu_before < 0.05);

  // A send from another thread ends the wait, the parts on every rail.
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto send = ranks[0].endpoint->isend(1, tag, data.data(), data.size());
    for (int i = 0; i < 100 && !send->done(); ++i) ranks[0].endpoint->progress(std::chrono::milliseconds(10));
  });
  const auto posted = std::chrono::steady_clock::now();
  while (!recv->done() && std::chrono::steady_clock::now() - posted < std::chrono::seconds(5)) {
    ranks[1].endpoint->progress(std::chrono::seconds(5));
  }
  sender.join();
  CHECK(std::chrono::steady_clock::now() - posted < std::chrono::seconds(2));
  REQUIRE(recv->state.load() == Request::State::kDone);
  CHECK(got == data);

  // wake() from another thread ends a wait with nothing to receive.
  std::thread waker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ranks[1].endpoint->wake();
  });
  const auto woken_at = std::chrono::steady_clock::now();
  CHECK(ranks[1].endpoint->progress(std::chrono::seconds(5)));
  waker.join();
  CHECK(std::chrono::steady_clock::now() - woken_at < std::chrono::seconds(2));
}

TEST_CASE("a striped endpoint refuses an address record that is not one", "[striped]") {
  auto ranks = connected({2});
  std::vector<std::vector<uint8_t>> addresses{ranks[0].endpoint->address(), {3, 1, 0}};
  CHECK_THROWS_AS(ranks[0].endpoint->connect(0, addresses), InvalidUsageError);
  addresses[1] = {};
  CHECK_THROWS_AS(ranks[0].endpoint->connect(0, addresses), InvalidUsageError);
}
