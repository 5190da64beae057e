// The provider "unix" (transport/unix): endpoints joined by Unix-domain sockets, here several in one process, driven
// by this thread in turn. The transport contract's matching and ordering, messages larger than a socket's buffer,
// truncation, and a peer whose endpoint closes.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "hiercoll/errors.hpp"
#include "endpoints.hpp"
#include "transport/unix/unix_endpoint.hpp"

using hiercoll::FabricError;
using hiercoll::test::Endpoints;
using hiercoll::test::received;
using hiercoll::transport::Endpoint;
using hiercoll::transport::open_unix_endpoint;
using hiercoll::transport::Request;
using hiercoll::transport::RequestPtr;

namespace {

Endpoints connected(int n) { return hiercoll::test::connected(n, open_unix_endpoint); }

// Drives every endpoint until `done` holds, `limit` at most (then the test fails on what it checks next).
void drive(Endpoints& endpoints, const std::function<bool()>& done,
           std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    for (auto& endpoint : endpoints) {
      if (endpoint) endpoint->progress(std::chrono::microseconds(0));
    }
  }
}

void drive_until_done(Endpoints& endpoints, const std::vector<RequestPtr>& requests) {
  drive(endpoints, [&] {
    for (const auto& r : requests) {
      if (!r->done()) return false;
    }
    return true;
  });
}

}  // namespace

TEST_CASE("the unix provider gives a message to the first posted receive, directed or from any rank", "[unix]") {
  auto endpoints = connected(3);
  const int first = 1, second = 2;
  int a = 0, b = 0;
  const bool any_first = GENERATE(true, false);
  RequestPtr any, directed;
  if (any_first) any = endpoints[0]->irecv(-1, 5, 0, &a, sizeof a);
  directed = endpoints[0]->irecv(1, 5, 0, &b, sizeof b);
  if (!any_first) any = endpoints[0]->irecv(-1, 5, 0, &a, sizeof a);
  auto s1 = endpoints[1]->isend(0, 5, &first, sizeof first);
  auto s2 = endpoints[1]->isend(0, 5, &second, sizeof second);
  drive_until_done(endpoints, {any, directed, s1, s2});
  CHECK(received(any, a) == (any_first ? 1 : 2));
  CHECK(received(directed, b) == (any_first ? 2 : 1));
  CHECK(any->source == 1);
}

TEST_CASE("the unix provider gives a receive the first arrived message that matches it", "[unix]") {
  auto endpoints = connected(3);
  const int from1_first = 10, from2 = 20, from1_second = 11, other_tag = 99;
  // Each message sent, then read by rank 0 (a message arrives when rank 0 reads it from its socket) before the next.
  auto send = [&](int from, uint64_t tag, const int& value) {
    auto request = endpoints[static_cast<size_t>(from)]->isend(0, tag, &value, sizeof value);
    drive_until_done(endpoints, {request});
    for (int i = 0; i < 3; ++i) endpoints[0]->progress(std::chrono::microseconds(1000));
  };
  send(1, 5, from1_first);
  send(2, 5, from2);
  send(1, 6, other_tag);
  send(1, 5, from1_second);
  int got = 0;
  auto take = [&](int peer, uint64_t tag, uint64_t ignore) {
    auto request = endpoints[0]->irecv(peer, tag, ignore, &got, sizeof got);
    drive_until_done(endpoints, {request});
    return received(request, got);
  };
  CHECK(take(-1, 5, 0) == 10);
  CHECK(take(-1, 5, 0) == 20);
  CHECK(take(1, 5, 0) == 11);
  CHECK(take(1, 0, ~uint64_t{0}) == 99);  // a tag ignored in every bit matches the one left
  auto pending = endpoints[0]->irecv(-1, 5, 0, &got, sizeof got);
  drive(endpoints, [] { return false; }, std::chrono::milliseconds(200));  // nothing arrives: it stays posted...
  CHECK_FALSE(pending->done());
  endpoints[0]->cancel_all("test over");  // ...until it is cancelled
  CHECK(pending->state.load() == Request::State::kFailed);
  CHECK(pending->error == "test over");
}

TEST_CASE("the unix provider carries messages larger than a socket's buffer whole and in order", "[unix]") {
  auto endpoints = connected(2);
  // 3 messages of 8 MB each way, posted before their receives and after, and an empty one between them.
  const size_t count = 2u << 20;
  std::vector<std::vector<int>> out(3, std::vector<int>(count)), in(3, std::vector<int>(count, -1));
  for (size_t m = 0; m < 3; ++m) std::iota(out[m].begin(), out[m].end(), static_cast<int>(m * 1000));
  std::vector<RequestPtr> requests;
  requests.push_back(endpoints[1]->irecv(0, 7, 0, in[0].data(), count * sizeof(int)));
  requests.push_back(endpoints[0]->isend(1, 7, out[0].data(), count * sizeof(int)));
  requests.push_back(endpoints[0]->isend(1, 8, nullptr, 0));
  requests.push_back(endpoints[0]->isend(1, 7, out[1].data(), count * sizeof(int)));
  requests.push_back(endpoints[0]->isend(1, 7, out[2].data(), count * sizeof(int)));
  drive(endpoints, [&] { return requests[1]->done(); });
  requests.push_back(endpoints[1]->irecv(0, 7, 0, in[1].data(), count * sizeof(int)));
  requests.push_back(endpoints[1]->irecv(0, 8, 0, nullptr, 0));
  requests.push_back(endpoints[1]->irecv(0, 7, 0, in[2].data(), count * sizeof(int)));
  drive_until_done(endpoints, requests);
  for (const auto& r : requests) CHECK(r->state.load() == Request::State::kDone);
  CHECK(requests[6]->bytes_done == 0);
  for (size_t m = 0; m < 3; ++m) CHECK(in[m] == out[m]);
}

TEST_CASE("the unix provider fails a receive too small for its message, naming both sizes", "[unix]") {
  auto endpoints = connected(2);
  const int big[4] = {1, 2, 3, 4};
  int small[2] = {0, 0};
  const bool posted_first = GENERATE(true, false);
  RequestPtr recv;
  if (posted_first) recv = endpoints[1]->irecv(0, 3, 0, small, sizeof small);
  auto send = endpoints[0]->isend(1, 3, big, sizeof big);
  drive_until_done(endpoints, {send});
  for (int i = 0; i < 10; ++i) endpoints[1]->progress(std::chrono::microseconds(1000));
  if (!posted_first) recv = endpoints[1]->irecv(0, 3, 0, small, sizeof small);
  drive_until_done(endpoints, {recv});
  REQUIRE(recv->state.load() == Request::State::kFailed);
  CHECK(recv->error == "message of 16 bytes truncated to the 8 posted");
}

TEST_CASE("a closed unix endpoint fails at once what its peers posted to and from it", "[unix]") {
  auto endpoints = connected(3);
  int got = 0;
  const int value = 5;
  // Rank 2 has sent to rank 0 (so rank 0 holds a connection from it) and rank 0 to rank 2.
  auto hello = endpoints[2]->isend(0, 1, &value, sizeof value);
  auto first = endpoints[0]->irecv(2, 1, 0, &got, sizeof got);
  auto out = endpoints[0]->isend(2, 1, &value, sizeof value);
  int sink = 0;
  auto taken = endpoints[2]->irecv(0, 1, 0, &sink, sizeof sink);
  drive_until_done(endpoints, {hello, first, out, taken});
  REQUIRE(received(first, got) == 5);
  auto waiting = endpoints[0]->irecv(2, 2, 0, &got, sizeof got);
  auto from_any = endpoints[0]->irecv(-1, 2, 0, &got, sizeof got);
  endpoints[2].reset();
  drive(endpoints, [&] { return waiting->done(); });
  REQUIRE(waiting->state.load() == Request::State::kFailed);
  CHECK_THAT(waiting->error, Catch::Contains("rank 2 closed its connection to rank 0"));
  CHECK_FALSE(from_any->done());  // another rank may still send it
  auto later = endpoints[0]->irecv(2, 3, 0, &got, sizeof got);
  CHECK(later->state.load() == Request::State::kFailed);
  // Sends: failed once the closed socket is seen, or at connect where none was open (rank 1 never sent to 2).
  std::vector<RequestPtr> sends{endpoints[0]->isend(2, 4, &value, sizeof value),
                                endpoints[1]->isend(2, 4, &value, sizeof value)};
  drive_until_done(endpoints, sends);
  for (const auto& s : sends) {
    CHECK(s->state.load() == Request::State::kFailed);
    CHECK_THAT(s->error, Catch::Contains("rank 2"));
  }
  endpoints[0]->cancel_all("test over");
  CHECK(from_any->state.load() == Request::State::kFailed);
}

TEST_CASE("the unix provider refuses another provider's address and wakes a blocked progress", "[unix]") {
  auto endpoint = open_unix_endpoint();
  std::vector<std::vector<uint8_t>> addresses{endpoint->address(), std::vector<uint8_t>(24, 7)};
  CHECK_THROWS_AS(endpoint->connect(0, addresses), FabricError);
  addresses.pop_back();
  endpoint->connect(0, addresses);
  const auto start = std::chrono::steady_clock::now();
  std::thread waker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    endpoint->wake();
  });
  endpoint->progress(std::chrono::seconds(20));
  waker.join();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}
