#include "hiercoll/store.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "hiercoll/errors.hpp"
#include "fuzz.hpp"
#include "raw_client.hpp"

using namespace hiercoll;
using namespace std::chrono_literals;
using hiercoll::test::RawClient;

namespace {
std::string temp_dir() {
  char pattern[] = "/tmp/hiercoll-store-test-XXXXXX";
  REQUIRE(mkdtemp(pattern) != nullptr);
  return pattern;
}

// The same contract for every store: set/get, blocking get, add from many threads, check, wait timeouts.
void exercise(std::function<std::shared_ptr<Store>()> make_client) {
  auto a = make_client();
  auto b = make_client();
  a->set("k", std::string("value"));
  CHECK(b->get_string("k") == "value");
  CHECK(b->check({"k"}));
  CHECK_FALSE(b->check({"k", "missing"}));

  std::thread late([&] {
    std::this_thread::sleep_for(50ms);
    a->set("late", std::string("here"));
  });
  CHECK(b->get_string("late") == "here");  // get waits for the key
  late.join();

  std::vector<std::thread> adders;
  std::vector<std::shared_ptr<Store>> clients;
  for (int t = 0; t < 4; ++t) clients.push_back(make_client());
  for (int t = 0; t < 4; ++t) {
    adders.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) clients[t]->add("counter", 2);
    });
  }
  for (auto& t : adders) t.join();
  CHECK(a->add("counter", 0) == 200);

  a->set_timeout(200ms);
  auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(a->get("never"), TimeoutError);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  CHECK_THROWS_WITH(a->wait({"k", "never", "nope"}, 100ms), Catch::Contains("never, nope"));
  // A timed-out get does not poison the next request.
  CHECK(a->get_string("k") == "value");

  // get_within: the value once it is set, a TimeoutError once the limit has passed, and the client still usable.
  start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(b->get_within("absent", 150ms), TimeoutError);
  const auto waited = std::chrono::steady_clock::now() - start;
  CHECK(waited >= 140ms);
  CHECK(waited < 3s);
  std::thread later([&] {
    std::this_thread::sleep_for(50ms);
    a->set("soon", std::string("now"));
  });
  const Store::Bytes soon = b->get_within("soon", 5s);
  later.join();
  CHECK(std::string(soon.begin(), soon.end()) == "now");
  CHECK(b->get_string("k") == "value");

  PrefixStore prefixed("p", a);
  prefixed.set("k", std::string("inner"));
  CHECK(b->get_string("p/k") == "inner");
  CHECK(b->get_string("k") == "value");
  const Store::Bytes inner = prefixed.get_within("k", 1s);
  CHECK(std::string(inner.begin(), inner.end()) == "inner");
}
}  // namespace

TEST_CASE("the TCP store keeps the store contract", "[store]") {
  auto server = std::make_shared<TcpStore>("127.0.0.1", 0, true, 10s);
  uint16_t port = server->port();
  exercise([port] { return std::make_shared<TcpStore>("127.0.0.1", port, false, 10s); });
}

// A timed read is one request however long it waits, and its expiry leaves the connection as it was: the server
// counts exactly the requests made.
TEST_CASE("a timed read of the TCP store is one request, answered either way", "[store]") {
  TcpStore server("127.0.0.1", 0, true, 10s);
  TcpStore client("127.0.0.1", server.port(), false, 10s);
  const uint64_t before = server.requests_served();
  CHECK_THROWS_AS(client.get_within("absent", 300ms), TimeoutError);
  client.set("here", std::string("v"));
  CHECK(client.get_within("here", 1s) == Store::Bytes{'v'});
  CHECK(server.requests_served() - before == 3);
}

TEST_CASE("the file store keeps the store contract", "[store]") {
  std::string dir = temp_dir();
  exercise([dir] { return std::make_shared<FileStore>(dir, 10s); });
  CHECK(std::system(("rm -rf " + dir).c_str()) == 0);
}

TEST_CASE("a file store made to remove its directory does so, keys and all; others leave it", "[store]") {
  auto exists = [](const std::string& path) {
    struct stat info {};
    return ::stat(path.c_str(), &info) == 0;
  };
  std::string kept = temp_dir(), removed = temp_dir();
  {
    FileStore keeper(kept, 10s), remover(removed, 10s, /*remove_when_done=*/true);
    for (auto* store : {&keeper, &remover}) {
      store->set("a/b", Store::Bytes{1, 2, 3});  // "/" in a key stays one flat file
      store->set("c", Store::Bytes{4});
    }
  }
  CHECK(exists(kept + "/c"));
  CHECK_FALSE(exists(removed));
  CHECK(std::system(("rm -rf " + kept).c_str()) == 0);
}

TEST_CASE("a TCP client with no server times out with the address in the message", "[store]") {
  CHECK_THROWS_WITH(TcpStore("127.0.0.1", 1, false, 300ms), Catch::Contains("127.0.0.1:1"));
}

TEST_CASE("store URLs are parsed or refused clearly", "[store]") {
  CHECK_THROWS_WITH(open_store("udp://x:1", 0), Catch::Contains("neither tcp://"));
  CHECK_THROWS_WITH(open_store("tcp://localhost", 0), Catch::Contains("lacks a port"));
  CHECK_THROWS_WITH(open_store("tcp://localhost:99999", 0), Catch::Contains("no valid port"));
  CHECK_THROWS_WITH(open_store("tcp://localhost:29500x", 0), Catch::Contains("no valid port"));  // atoi took 29500
  CHECK_THROWS_WITH(open_store("tcp://localhost:-1", 0), Catch::Contains("no valid port"));
  CHECK_THROWS_WITH(open_store("tcp://localhost:4294996796", 0), Catch::Contains("no valid port"));
}

namespace {
// A raw TCP connection to the store server, for frames no TcpStore client would send.
std::vector<uint8_t> frame(uint8_t command, uint32_t key_len, const std::string& key, uint64_t value_len,
                           const std::vector<uint8_t>& value) {
  std::vector<uint8_t> out{command};
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(key_len >> (8 * i)));
  out.insert(out.end(), key.begin(), key.end());
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(value_len >> (8 * i)));
  out.insert(out.end(), value.begin(), value.end());
  return out;
}
}  // namespace

// Nothing a client sends can end the server: a corrupt or hostile frame drops that connection (with a warning) and
// every other client keeps its store. The first frame is the 13 bytes that used to abort the whole job: a SET whose
// value length, added to the header, wrapped around.
TEST_CASE("hostile frames drop their connection and leave the TCP store serving", "[store]") {
  TcpStore server("127.0.0.1", 0, true, 10s);
  TcpStore client("127.0.0.1", server.port(), false, 10s);
  client.set("kept", std::string("intact"));
  const std::vector<std::pair<const char*, std::vector<uint8_t>>> hostile = {
      {"value length 2^64-8", frame(1, 0, "", ~uint64_t{7}, {})},
      {"key length 2^32-1", frame(1, 0xffffffffu, "", 0, {})},
      {"value of 1 GiB announced", frame(1, 1, "k", uint64_t{1} << 30, {})},
      {"ADD of a 3-byte value", frame(3, 1, "n", 3, {1, 2, 3})},
      {"unknown command", frame(9, 1, "k", 0, {})},
  };
  for (const auto& [what, bytes] : hostile) {
    INFO(what);
    RawClient raw(server.port());
    raw.send(bytes);
    CHECK(raw.closed_by_server(5s));
    CHECK(client.get_string("kept") == "intact");
  }

  // Thousands of random and mutated frames over many connections; then the store still answers, unchanged.
  std::mt19937 rng(1234);
  std::vector<uint8_t> valid = frame(1, 3, "abc", 4, {1, 2, 3, 4});
  for (int connection = 0; connection < 50; ++connection) {
    RawClient raw(server.port());
    raw.send(hiercoll::test::fuzzed_frames(valid, 100, rng, 40));
  }
  CHECK(client.get_string("kept") == "intact");
  client.set("after", std::string("fuzz"));
  TcpStore late("127.0.0.1", server.port(), false, 10s);
  CHECK(late.get_string("after") == "fuzz");
}

TEST_CASE("a TCP store with a job token serves only clients that present it", "[store]") {
  TcpStore server("127.0.0.1", 0, true, 10s, "job-a");
  TcpStore member("127.0.0.1", server.port(), false, 10s, "job-a");
  member.set("k", std::string("v"));
  // Another job's rank is refused at connect, naming the token.
  try {
    TcpStore other("127.0.0.1", server.port(), false, 3s, "job-b");
    FAIL("another job's token was admitted");
  } catch (const InvalidUsageError& e) {
    CHECK(std::string(e.what()).find("HIERCOLL_JOB_TOKEN") != std::string::npos);
  }
  // A client without one is dropped at its first request, as is a raw SET.
  TcpStore stray("127.0.0.1", server.port(), false, 3s);
  CHECK_THROWS(stray.set("k", std::string("overwritten")));
  RawClient raw(server.port());
  raw.send(frame(1, 1, "k", 1, {'x'}));
  CHECK(raw.closed_by_server(5s));
  CHECK(member.get_string("k") == "v");
  // A server without a token admits clients that have one (a job token set on the ranks only).
  TcpStore open("127.0.0.1", 0, true, 10s);
  TcpStore with_token("127.0.0.1", open.port(), false, 10s, "job-a");
  with_token.set("x", std::string("y"));
  CHECK(open.get_string("x") == "y");
}
