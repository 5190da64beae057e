// The provider "memory" (transport/memory): endpoints of one process joined by the addresses they publish, and the
// matching rules of the transport contract kept by its per-source lists.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "endpoints.hpp"
#include "hiercoll/errors.hpp"
#include "transport/memory/memory_fabric.hpp"

using hiercoll::InvalidUsageError;
using hiercoll::RemoteError;
using hiercoll::test::received;
using hiercoll::transport::Endpoint;
using hiercoll::transport::open_memory_endpoint;
using hiercoll::transport::Request;
using hiercoll::transport::RequestPtr;

namespace {

// n endpoints of the process's memory fabric, connected as ranks 0..n-1.
hiercoll::test::Endpoints connected(int n) { return hiercoll::test::connected(n, open_memory_endpoint); }

}  // namespace

TEST_CASE("the memory provider joins the endpoints of one process by address and refuses others", "[memory]") {
  auto endpoints = connected(3);
  const int sent = 42;
  int got = 0;
  auto recv = endpoints[2]->irecv(0, 9, 0, &got, sizeof got);
  auto send = endpoints[0]->isend(2, 9, &sent, sizeof sent);
  REQUIRE(send->state.load() == Request::State::kDone);
  CHECK(received(recv, got) == 42);
  CHECK(recv->source == 0);

  // An address naming another process: the message says which rank and that it must be a thread of this one.
  auto stranger = open_memory_endpoint();
  std::vector<std::vector<uint8_t>> addresses{stranger->address(), endpoints[1]->address()};
  const uint32_t other_pid = static_cast<uint32_t>(getpid()) + 1;
  std::memcpy(addresses[1].data(), &other_pid, sizeof other_pid);
  CHECK_THROWS_MATCHES(stranger->connect(0, addresses), InvalidUsageError,
                       Catch::Matchers::Predicate<InvalidUsageError>([](const InvalidUsageError& e) {
                         return std::string(e.what()).find("rank 1 runs in process") != std::string::npos;
                       }));
  // A closed endpoint's address: its rank is gone.
  auto gone = open_memory_endpoint();
  addresses[1] = gone->address();
  gone.reset();
  CHECK_THROWS_AS(stranger->connect(0, addresses), RemoteError);
  // Another provider's address (a libfabric one is longer).
  addresses[1].resize(24);
  CHECK_THROWS_AS(stranger->connect(0, addresses), InvalidUsageError);
}

TEST_CASE("the memory provider gives a message to the first posted receive, directed or from any rank", "[memory]") {
  auto endpoints = connected(3);
  const int first = 1, second = 2;
  int a = 0, b = 0;
  SECTION("any-source posted first") {
    auto any = endpoints[0]->irecv(-1, 5, 0, &a, sizeof a);
    auto directed = endpoints[0]->irecv(1, 5, 0, &b, sizeof b);
    endpoints[1]->isend(0, 5, &first, sizeof first);
    endpoints[1]->isend(0, 5, &second, sizeof second);
    CHECK(received(any, a) == 1);
    CHECK(received(directed, b) == 2);
  }
  SECTION("directed posted first") {
    auto directed = endpoints[0]->irecv(1, 5, 0, &b, sizeof b);
    auto any = endpoints[0]->irecv(-1, 5, 0, &a, sizeof a);
    endpoints[1]->isend(0, 5, &first, sizeof first);
    endpoints[1]->isend(0, 5, &second, sizeof second);
    CHECK(received(directed, b) == 1);
    CHECK(received(any, a) == 2);
  }
}

TEST_CASE("the memory provider gives a receive the first arrived message that matches it", "[memory]") {
  auto endpoints = connected(3);
  const int from1_first = 10, from2 = 20, from1_second = 11, other_tag = 99;
  endpoints[1]->isend(0, 5, &from1_first, sizeof from1_first);
  endpoints[2]->isend(0, 5, &from2, sizeof from2);
  endpoints[1]->isend(0, 6, &other_tag, sizeof other_tag);
  endpoints[1]->isend(0, 5, &from1_second, sizeof from1_second);
  int got = 0;
  CHECK(received(endpoints[0]->irecv(-1, 5, 0, &got, sizeof got), got) == 10);
  CHECK(received(endpoints[0]->irecv(-1, 5, 0, &got, sizeof got), got) == 20);
  CHECK(received(endpoints[0]->irecv(1, 5, 0, &got, sizeof got), got) == 11);
  // A tag ignored in every bit matches the one left, whatever its tag.
  auto wildcard = endpoints[0]->irecv(1, 0, ~uint64_t{0}, &got, sizeof got);
  CHECK(received(wildcard, got) == 99);
  // Nothing is left: a further receive stays posted until the endpoint closes.
  auto pending = endpoints[0]->irecv(-1, 5, 0, &got, sizeof got);
  CHECK_FALSE(pending->done());
  endpoints[0]->cancel_all("test over");
  CHECK(pending->state.load() == Request::State::kFailed);
}
