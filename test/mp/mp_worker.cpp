// One rank of the multi-process tests, started by test/common/launcher (or mpirun). Each scenario runs
// real collectives and compares this rank's results, element by element, with a serial reference that
// the rank computes itself from everyone's (deterministic) inputs. Exit code 0 means every element matched.
#include <dirent.h>
#include <execinfo.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collective_cases.hpp"
#include "collective_checks.hpp"
#include "expect.hpp"
#include "hiercoll/hiercoll.hpp"
#include "values.hpp"

using namespace hiercoll;
using hiercoll::test::expect_equal;
using hiercoll::test::expect;
using hiercoll::test::expect_invalid;
using hiercoll::test::get;
using hiercoll::test::input_value;
using hiercoll::test::put;

namespace {

int& g_failures = hiercoll::test::failure_count();

struct Buffer {
  std::vector<uint64_t> storage;  // uint64_t: 8-byte alignment for every element type
  void* data() { return storage.data(); }
  explicit Buffer(size_t bytes) : storage((bytes + 7) / 8 + 1) {}
};

Buffer make_input(int rank, size_t count, DataType type, ReduceOp op, uint32_t seed, size_t first_index = 0) {
  Buffer buffer(count * dtype_size(type));
  for (size_t i = 0; i < count; ++i) put(type, buffer.data(), i, input_value(rank, first_index + i, type, op, seed));
  return buffer;
}

std::string name(const char* op, DataType type, ReduceOp reduce_op, size_t count, bool in_place) {
  return std::string(op) + " " + to_string(type) + " " + to_string(reduce_op) + " count=" + std::to_string(count) +
         (in_place ? " in-place" : " out-of-place");
}

std::vector<size_t> sizes(bool large) {
  std::vector<size_t> list = {0, 1, 2, 7, 31, 1000, 4099, 65537};
  if (large) list.push_back(1 << 20);
  return list;
}

// Runs one case of the shared table (collective_cases.hpp) on host buffers: an out-of-place run's output starts
// poisoned (NaN, or -1 in integer types), so an element the collective never wrote shows.
void run_case(Communicator& comm, const hiercoll::test::CollectiveCase& c, const hiercoll::test::CaseArgs& a) {
  const size_t elem = dtype_size(a.type);
  const hiercoll::test::Placement p = hiercoll::test::placement(c, a);
  Buffer first(p.buffer_elems[0] * elem), second(p.buffer_elems[1] * elem);
  std::fill(second.storage.begin(), second.storage.end(), ~uint64_t{0});
  uint8_t* in = static_cast<uint8_t*>(first.data()) + p.in_at * elem;
  uint8_t* out = static_cast<uint8_t*>(a.in_place ? first.data() : second.data()) + p.out_at * elem;
  for (size_t i = 0; i < c.in_elems(a); ++i) put(a.type, in, i, c.input(a, i));
  c.call(comm, a, in, out, CallOptions{}).wait();
  const std::string what = hiercoll::test::case_name(c, a);
  for (size_t i = 0; i < c.out_elems(a); ++i) {
    if (auto want = c.want(a, i)) expect_equal(what, a.type, a.op, out, i, *want);
  }
}

void run_allreduce(Communicator& comm, bool large) {
  const int n = comm.size(), r = comm.rank();
  const auto& allreduce = hiercoll::test::collective_case("allreduce");
  for (DataType type : hiercoll::test::matrix_types()) {
    for (size_t count : sizes(large)) {
      const uint32_t seed = static_cast<uint32_t>(count * 31 + static_cast<int>(type) * 7);
      hiercoll::test::for_each_run(allreduce, r, n, type, count, hiercoll::test::matrix_ops(), {false, true}, seed,
                                   [&](const hiercoll::test::CaseArgs& a) { run_case(comm, allreduce, a); });
    }
  }
  // Tens of MB, once per type family: the pipelined ring with many chunks per segment. Under the sanitizers
  // (scripts/dev/sanitize) HIERCOLL_TEST_LARGE_BYTES makes it a few MB: still many chunks and pieces at the tests'
  // chunk and piece sizes, and the races they look for need no more data, which is slower to check under them.
  const char* large_bytes = std::getenv("HIERCOLL_TEST_LARGE_BYTES");
  const size_t big = large_bytes ? std::strtoull(large_bytes, nullptr, 10) : size_t{24} << 20;
  for (DataType type : {DataType::kFloat32, DataType::kBFloat16}) {
    size_t count = big / dtype_size(type) + 3;
    uint32_t seed = 99;
    Buffer in = make_input(r, count, type, ReduceOp::kSum, seed);
    comm.allreduce(in.data(), in.data(), count, type, ReduceOp::kSum).wait();
    std::string what = name("allreduce", type, ReduceOp::kSum, count, true);
    for (size_t i = 0; i < count; ++i) {
      expect_equal(what, type, ReduceOp::kSum, in.data(), i,
                   hiercoll::test::reference_value(n, i, type, ReduceOp::kSum, seed));
    }
  }
}

// Every collective of the shared table, every type, sizes from empty to past the pipelines' chunks, in place and
// not, every root.
void run_collectives(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  for (const auto& c : hiercoll::test::collective_cases()) {
    for (DataType type : hiercoll::test::matrix_types()) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{1000}, size_t{70001}}) {
        const uint32_t seed = static_cast<uint32_t>(count + 17 * static_cast<int>(type));
        hiercoll::test::for_each_run(c, r, n, type, count, {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg},
                                     {false, true}, seed,
                                     [&](const hiercoll::test::CaseArgs& a) { run_case(comm, c, a); });
      }
    }
  }
  comm.barrier().wait();
  // Point to point around the ring, both directions posted before waiting (must not deadlock), 8 MB.
  if (n > 1) {
    const size_t count = 2u << 20;
    Buffer mine = make_input(r, count, DataType::kFloat32, ReduceOp::kSum, 5);
    Buffer from_left(count * 4), from_right(count * 4);
    int right = (r + 1) % n, left = (r - 1 + n) % n;
    Work s1 = comm.send(mine.data(), count, DataType::kFloat32, right, 1);
    Work s2 = comm.send(mine.data(), count, DataType::kFloat32, left, 2);
    Work r1 = comm.recv(from_left.data(), count, DataType::kFloat32, left, 1);
    Work r2 = comm.recv(from_right.data(), count, DataType::kFloat32, right, 2);
    s1.wait();
    s2.wait();
    r1.wait();
    r2.wait();
    Buffer want_left = make_input(left, count, DataType::kFloat32, ReduceOp::kSum, 5);
    Buffer want_right = make_input(right, count, DataType::kFloat32, ReduceOp::kSum, 5);
    for (size_t i = 0; i < count; ++i) {
      expect_equal("recv from left", DataType::kFloat32, ReduceOp::kSum, from_left.data(), i,
                   get(DataType::kFloat32, want_left.data(), i));
      expect_equal("recv from right", DataType::kFloat32, ReduceOp::kSum, from_right.data(), i,
                   get(DataType::kFloat32, want_right.data(), i));
    }
    if (r1.source() != left || s1.source() != -1) {
      std::printf("FAIL: recv from left: Work::source() = %d, the send's = %d\n", r1.source(), s1.source());
      ++g_failures;
    }
    // Receives from any source: rank 0 takes one message from every other rank in whatever order they arrive,
    // and Work::source() must name the rank whose data landed in each buffer.
    const size_t small = 1000;
    if (r == 0) {
      std::vector<Buffer> got;
      std::vector<Work> works;
      for (int k = 1; k < n; ++k) {
        got.emplace_back(small * 4);
        works.push_back(comm.recv(got.back().data(), small, DataType::kFloat32, Communicator::kAnySource, 7));
      }
      std::vector<bool> seen(static_cast<size_t>(n), false);
      for (int k = 0; k + 1 < n; ++k) {
        works[static_cast<size_t>(k)].wait();
        int from = works[static_cast<size_t>(k)].source();
        if (from < 1 || from >= n || seen[static_cast<size_t>(from)]) {
          std::printf("FAIL: recv from any source: Work::source() = %d\n", from);
          ++g_failures;
          continue;
        }
        seen[static_cast<size_t>(from)] = true;
        Buffer want = make_input(from, small, DataType::kFloat32, ReduceOp::kSum, 9);
        for (size_t i = 0; i < small; ++i) {
          expect_equal("recv from any source", DataType::kFloat32, ReduceOp::kSum, got[static_cast<size_t>(k)].data(),
                       i, get(DataType::kFloat32, want.data(), i));
        }
      }
    } else {
      Buffer data = make_input(r, small, DataType::kFloat32, ReduceOp::kSum, 9);
      comm.send(data.data(), small, DataType::kFloat32, 0, 7).wait();
    }
  }
}

void run_errors(Communicator& comm) {
  const int n = comm.size();
  std::vector<float> a(64), b(64);
  expect_invalid("null input", "input buffer is null",
                 [&] { comm.allreduce(nullptr, b.data(), 4, DataType::kFloat32, ReduceOp::kSum); });
  expect_invalid("misaligned", "not aligned", [&] {
    comm.allreduce(reinterpret_cast<char*>(a.data()) + 1, b.data(), 4, DataType::kFloat32, ReduceOp::kSum);
  });
  expect_invalid("avg on int", "avg is defined on floating types only",
                 [&] { comm.allreduce(a.data(), b.data(), 4, DataType::kInt32, ReduceOp::kAvg); });
  expect_invalid("bad root", "root " + std::to_string(n),
                 [&] { comm.broadcast(a.data(), a.data(), 4, DataType::kFloat32, n); });
  expect_invalid("negative root", "root -1",
                 [&] { comm.reduce(a.data(), b.data(), 4, DataType::kFloat32, ReduceOp::kSum, -1); });
  expect_invalid("overlap", "overlap",
                 [&] { comm.allreduce(a.data(), a.data() + 1, 8, DataType::kFloat32, ReduceOp::kSum); });
  expect_invalid("bad peer", "peer", [&] { comm.send(a.data(), 4, DataType::kFloat32, n + 3); });
  expect_invalid("bad type", "unknown data type",
                 [&] { comm.allreduce(a.data(), b.data(), 4, static_cast<DataType>(42), ReduceOp::kSum); });
  // Bad input must leave the communicator usable.
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(comm.rank() + 1);
  comm.allreduce(a.data(), b.data(), a.size(), DataType::kFloat32, ReduceOp::kSum).wait();
  for (size_t i = 0; i < b.size(); ++i) {
    expect_equal("allreduce after bad input", DataType::kFloat32, ReduceOp::kSum, b.data(), i, n * (n + 1) / 2.0);
  }
}

// Ranks disagree on the count: every rank must get an error (never hang, never wrong data silently).
void run_mismatch(Communicator& comm) {
  size_t count = comm.rank() == 0 ? 1000 : 3000;
  std::vector<float> a(count, 1.0f);
  try {
    comm.allreduce(a.data(), a.data(), count, DataType::kFloat32, ReduceOp::kSum).wait();
    std::printf("FAIL: mismatched allreduce completed without error\n");
    ++g_failures;
  } catch (const Error& e) {
    std::printf("EXPECTED ERROR [%s]: %s\n", to_string(e.code()), e.what());
  }
}

// Rank HIERCOLL_TEST_DIE_RANK kills itself in the middle of a series of allreduces (of HIERCOLL_TEST_DIE_COUNT
// floats, 4M by default); every other rank must fail with an error within the timeout (never hang) and say which
// operation failed.
void run_die(Communicator& comm) {
  int die_rank = std::atoi(std::getenv("HIERCOLL_TEST_DIE_RANK") ? std::getenv("HIERCOLL_TEST_DIE_RANK") : "1");
  const char* count = std::getenv("HIERCOLL_TEST_DIE_COUNT");
  std::vector<float> data(count ? std::strtoul(count, nullptr, 10) : 4u << 20, 1.0f);
  try {
    for (int i = 0; i < 50; ++i) {
      if (comm.rank() == die_rank && i == 3) raise(SIGKILL);
      comm.allreduce(data.data(), data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum).wait();
    }
    std::printf("FAIL: survived a dead peer\n");
    ++g_failures;
  } catch (const Error& e) {
    std::printf("EXPECTED ERROR [%s]: %s\n", to_string(e.code()), e.what());
  }
}

// Addresses are inserted at the first send to each peer (docs/design.md, "Addresses"): after ring allreduces and a
// barrier a rank has inserted those of its ring neighbour and its barrier partners, at most 1 + ceil(log2 N), not N;
// after an alltoall, every other rank's, once each.
void run_addresses(Communicator& comm) {
  const int n = comm.size();
  std::vector<float> data(1 << 16, 1.0f);
  for (int i = 0; i < 3; ++i)
    comm.allreduce(data.data(), data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum).wait();
  comm.barrier().wait();
  uint64_t most = 1;
  for (int span = 1; span < n; span *= 2) ++most;
  const uint64_t after_ring = comm.fabric_stats().addresses_inserted;
  std::printf("ADDRESSES after ring allreduces and a barrier: %llu of %d ranks\n",
              static_cast<unsigned long long>(after_ring), n);
  if (after_ring == 0 || after_ring > most) {
    std::printf("MISMATCH: %llu addresses inserted, expected 1 to %llu\n", static_cast<unsigned long long>(after_ring),
                static_cast<unsigned long long>(most));
    ++g_failures;
  }
  std::vector<float> in(static_cast<size_t>(n) * 16, 2.0f), out(in.size());
  comm.alltoall(in.data(), out.data(), 16, DataType::kFloat32).wait();
  comm.alltoall(in.data(), out.data(), 16, DataType::kFloat32).wait();
  const uint64_t after_alltoall = comm.fabric_stats().addresses_inserted;
  std::printf("ADDRESSES after alltoall: %llu\n", static_cast<unsigned long long>(after_alltoall));
  if (after_alltoall != static_cast<uint64_t>(n - 1)) {
    std::printf("MISMATCH: %llu addresses inserted after alltoall, expected %d (each other rank once)\n",
                static_cast<unsigned long long>(after_alltoall), n - 1);
    ++g_failures;
  }
  for (float v : out) {
    if (v != 2.0f) {
      std::printf("MISMATCH: alltoall delivered %g, expected 2\n", static_cast<double>(v));
      ++g_failures;
      break;
    }
  }
}

// One fabric and one domain per NIC, shared by the process's communicators (docs/design.md, "One domain per NIC"):
// beside the job's communicator, 8 more as torch makes for its process groups (4 over every rank, 4 over pairs of
// ranks), all running allreduces at once from their own threads; every result against the serial reference. The
// process's census: one fabric, one domain per NIC of the rank's share whatever the number of communicators, an
// endpoint per communicator and NIC; once the 8 are gone, the job's communicator's alone, and it still runs.
Communicator named_communicator(const std::string& name, int rank, int size);
void run_subgroups(Communicator& comm) {
  const int rank = comm.rank(), n = comm.size();
  const std::string nic = comm.fabric_nic();
  const uint64_t nics = 1 + static_cast<uint64_t>(std::count(nic.begin(), nic.end(), ','));
  auto census = [&](const char* when, uint64_t endpoints) {
    const Communicator::FabricStats stats = comm.fabric_stats();
    std::printf("CENSUS %s: %llu fabric(s), %llu domain(s), %llu endpoint(s) on %s\n", when,
                static_cast<unsigned long long>(stats.process_fabrics),
                static_cast<unsigned long long>(stats.process_domains),
                static_cast<unsigned long long>(stats.process_endpoints), nic.c_str());
    if (stats.process_fabrics != 1 || stats.process_domains != nics || stats.process_endpoints != endpoints) {
      std::printf("MISMATCH: %s: expected 1 fabric, %llu domain(s), %llu endpoint(s)\n", when,
                  static_cast<unsigned long long>(nics), static_cast<unsigned long long>(endpoints));
      ++g_failures;
    }
  };
  census("alone", nics);
  {
    struct Group {
      Communicator comm;
      std::vector<int> members;  // job ranks, in group rank order
    };
    std::vector<Group> groups;
    for (int k = 0; k < 8; ++k) {
      std::vector<int> members;
      std::string name = "subgroup-" + std::to_string(k);
      if (k % 2 == 0 || n < 4) {
        for (int r = 0; r < n; ++r) members.push_back(k % 4 == 0 ? r : n - 1 - r);  // every rank, some reversed
      } else {
        const int first = rank - rank % 2;  // pairs {0,1}, {2,3}, ...
        members = {first, first + 1};
        if (members[1] >= n) members.pop_back();
        name += "-pair-" + std::to_string(first);
      }
      const int index = static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
      groups.push_back({named_communicator(name, index, static_cast<int>(members.size())), members});
    }
    census("with 8 subgroups", 9 * nics);
    constexpr size_t kCount = 1 << 18;  // 1 MB: several messages per call between the emulated nodes
    std::vector<std::vector<float>> data(groups.size(), std::vector<float>(kCount));
    for (int round = 0; round < 2; ++round) {
      std::vector<Work> works;
      for (size_t g = 0; g < groups.size(); ++g) {
        for (size_t i = 0; i < kCount; ++i) data[g][i] = static_cast<float>((rank + 1) * (round + 1) + g + i % 7);
        works.push_back(groups[g].comm.allreduce(data[g].data(), data[g].data(), kCount, DataType::kFloat32,
                                                 ReduceOp::kSum));
      }
      for (Work& work : works) work.wait();
      for (size_t g = 0; g < groups.size(); ++g) {
        for (size_t i = 0; i < kCount; i += 997) {
          double want = 0;
          for (int member : groups[g].members)
            want += static_cast<double>((member + 1) * (round + 1) + g + i % 7);
          expect_equal("subgroup allreduce", DataType::kFloat32, ReduceOp::kSum, data[g].data(), i, want);
        }
      }
    }
  }
  census("after the subgroups", nics);
  std::vector<float> x(1000, static_cast<float>(rank));
  comm.allreduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum).wait();
  expect_equal("allreduce after the subgroups", DataType::kFloat32, ReduceOp::kSum, x.data(), 0,
               static_cast<double>(n) * (n - 1) / 2);
}

// Registrations follow their pages (run under HIERCOLL_FABRIC_FORCE_MR=1): allreduces in place on an mmap'd buffer,
// then the buffer unmapped and fresh memory mapped at the same address, and allreduces there again. Every call's
// result against the serial reference; every call makes at most kMostPerCall registrations (the operation's own pins,
// not one per message); once a call returned none of its buffer's is held (what the communicator holds is what it
// held after the first call: its scratch and staging buffers); and the first call on the new pages registers them
// anew (a registration kept from before would name the old pages).
void run_mr_pages(Communicator& comm) {
  constexpr uint64_t kMostPerCall = 4;
  const size_t count = std::getenv("HIERCOLL_TEST_LARGE_BYTES") ? 1u << 20 : 4u << 20;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = (count * sizeof(float) + page - 1) / page * page;
  if (comm.fabric_stats().registrations_made == 0) {
    std::printf("MISMATCH: no registrations at all (is HIERCOLL_FABRIC_FORCE_MR=1 set?)\n");
    ++g_failures;
    return;
  }
  void* at = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (at == MAP_FAILED) {
    std::printf("FAIL: mmap of %zu bytes\n", bytes);
    ++g_failures;
    return;
  }
  uint64_t settled = 0;  // held after the first call
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {
      munmap(at, bytes);
      void* again = mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      if (again != at) {
        std::printf("FAIL: could not map the same address again\n");
        ++g_failures;
        return;
      }
    }
    for (int call = 0; call < 3; ++call) {
      const uint32_t seed = static_cast<uint32_t>(10 * round + call + 1);
      Buffer in = make_input(comm.rank(), count, DataType::kFloat32, ReduceOp::kSum, seed);
      std::memcpy(at, in.data(), count * sizeof(float));
      const auto before = comm.fabric_stats();
      comm.allreduce(at, at, count, DataType::kFloat32, ReduceOp::kSum).wait();
      const auto after = comm.fabric_stats();
      const uint64_t made = after.registrations_made - before.registrations_made;
      std::printf("MR round %d call %d: made %llu, held %llu\n", round, call, static_cast<unsigned long long>(made),
                  static_cast<unsigned long long>(after.registrations_held));
      for (size_t i = 0; i < count; ++i) {
        expect_equal("mr-pages allreduce", DataType::kFloat32, ReduceOp::kSum, static_cast<const uint8_t*>(at), i,
                     hiercoll::test::reference_value(comm.size(), i, DataType::kFloat32, ReduceOp::kSum, seed));
      }
      if (made > kMostPerCall) {
        std::printf("MISMATCH: round %d call %d made %llu registrations (at most %llu)\n", round, call,
                    static_cast<unsigned long long>(made), static_cast<unsigned long long>(kMostPerCall));
        ++g_failures;
      }
      if (round == 0 && call == 0) settled = after.registrations_held;
      if (after.registrations_held != settled) {
        std::printf("MISMATCH: round %d call %d left %llu registrations held, not %llu\n", round, call,
                    static_cast<unsigned long long>(after.registrations_held),
                    static_cast<unsigned long long>(settled));
        ++g_failures;
      }
      if (round == 1 && call == 0 && made == 0) {
        std::printf("MISMATCH: the new pages were not registered anew\n");
        ++g_failures;
      }
    }
  }
  munmap(at, bytes);
}

// Rank HIERCOLL_TEST_DIE_RANK dies HIERCOLL_TEST_DIE_AFTER_MS into a series of large allreduces (HIERCOLL_TEST_DIE_COUNT
// floats) whose buffers every rank maps itself. The moment the error returns, each survivor unmaps them,
// maps fresh pages at the same addresses, fills them with a pattern and keeps them a second while the rest of the job
// falls apart around it: a request the provider still held on the old buffers (a live peer's data arriving into a
// posted receive, a send in its retries) would now write into, or fault on, the new pages. Prints REMAP OK when every
// byte kept the pattern.
void run_die_remap(Communicator& comm) {
  const int victim = std::atoi(std::getenv("HIERCOLL_TEST_DIE_RANK") ? std::getenv("HIERCOLL_TEST_DIE_RANK") : "1");
  const char* count_text = std::getenv("HIERCOLL_TEST_DIE_COUNT");
  const char* after_text = std::getenv("HIERCOLL_TEST_DIE_AFTER_MS");
  // 256 MB; 16 MB under the sanitizers (HIERCOLL_TEST_LARGE_BYTES, scripts/dev/sanitize), which stretch each pass.
  const size_t count = count_text                                 ? std::strtoul(count_text, nullptr, 10)
                       : std::getenv("HIERCOLL_TEST_LARGE_BYTES") ? 4u << 20
                                                                  : 64u << 20;
  const int after_ms = after_text ? std::atoi(after_text) : 300;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = (count * sizeof(float) + page - 1) / page * page;
  auto map = [bytes](void* at) {
    const int fixed = at ? MAP_FIXED_NOREPLACE : 0;
    void* p = mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | fixed, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
  };
  void* in = map(nullptr);
  void* out = map(nullptr);
  if (!in || !out) {
    std::printf("FAIL: mmap of %zu bytes\n", bytes);
    ++g_failures;
    return;
  }
  std::fill_n(static_cast<float*>(in), count, 1.0f);
  comm.barrier().wait();  // every rank is in before the victim's clock starts
  if (comm.rank() == victim) {
    std::thread([after_ms] {
      std::this_thread::sleep_for(std::chrono::milliseconds(after_ms));
      raise(SIGKILL);
    }).detach();
  }
  try {
    // Until the victim's death fails one, for at most a minute.
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < end)
      comm.allreduce(in, out, count, DataType::kFloat32, ReduceOp::kSum).wait();
    std::printf("FAIL: survived a dead peer\n");
    ++g_failures;
    return;
  } catch (const Error& e) {
    munmap(in, bytes);
    munmap(out, bytes);
    void* again_in = map(in);
    void* again_out = map(out);
    if (again_in != in || again_out != out) {
      std::printf("FAIL: could not map the same addresses again\n");
      ++g_failures;
      return;
    }
    std::memset(in, 0x5a, bytes);
    std::memset(out, 0x5a, bytes);
    std::printf("EXPECTED ERROR [%s]: %s\n", to_string(e.code()), e.what());
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  size_t changed = 0;
  for (void* buffer : {in, out}) {
    const auto* p = static_cast<const unsigned char*>(buffer);
    for (size_t i = 0; i < bytes; ++i) changed += p[i] != 0x5a;
  }
  if (changed == 0) {
    std::printf("REMAP OK\n");
  } else {
    std::printf("FAIL: %zu bytes of the re-mapped buffers changed after the error returned\n", changed);
    ++g_failures;
  }
  munmap(in, bytes);
  munmap(out, bytes);
}

// Each rank sends its rank to the next around the ring of ranks and returns what the previous one sent (point to
// point, over the fabric), under `tag`.
int32_t pass_ring_token(Communicator& comm, int tag) {
  const int n = comm.size(), me = comm.rank();
  int32_t token = me, got = -1;
  auto sent = comm.send(&token, 1, DataType::kInt32, (me + 1) % n, tag);
  comm.recv(&got, 1, DataType::kInt32, (me + n - 1) % n, tag).wait();
  sent.wait();
  return got;
}

// HIERCOLL_TEST_DIE_RANK is killed right after create, before any operation. On one host with no provider named the
// fabric is still opening then, its address exchange waiting for the victim's: the survivors' point-to-point calls
// and collectives must fail naming it, once the peer watch reports it, not at the timeout.
void run_die_after_create(Communicator& comm) {
  const char* victim_text = std::getenv("HIERCOLL_TEST_DIE_RANK");
  const int victim = victim_text ? std::atoi(victim_text) : 1;
  if (comm.rank() == victim) raise(SIGKILL);
  try {
    for (int i = 0; i < 50; ++i) {
      pass_ring_token(comm, i);
      float x = 1.0f;
      comm.allreduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum).wait();
    }
    std::printf("FAIL: survived a dead peer\n");
    ++g_failures;
  } catch (const Error& e) {
    std::printf("EXPECTED ERROR [%s]: %s\n", to_string(e.code()), e.what());
  }
}

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A rank dies in the middle of an operation (or between two) and every other rank must fail within 2 s, naming it,
// whatever the timeout. HIERCOLL_TEST_VICTIM dies in operation HIERCOLL_TEST_DIE_ITER, HIERCOLL_TEST_DIE_AFTER_US
// after issuing it (-1: just before issuing it, so the others are waiting in it), as HIERCOLL_TEST_HOW says: kill
// (SIGKILL), segv (SIGSEGV), exit (exit(1) without destroying the communicator), stop (SIGSTOP: alive, its
// connections open, silent; the lowest surviving rank kills it once it is reported, by the pid the error names). Both sides print the moment on the
// steady clock (the same across processes of one host, network namespaces included): "DIED_AT ns" and "NOTICED_AT ns".
// Results before the death are checked; after the first error, the next operation must fail at once too.
void run_die_timed(Communicator& comm) {
  const int victim = std::atoi(std::getenv("HIERCOLL_TEST_VICTIM"));
  const int die_iter = std::atoi(std::getenv("HIERCOLL_TEST_DIE_ITER"));
  const long after_us = std::atol(std::getenv("HIERCOLL_TEST_DIE_AFTER_US"));
  const std::string how = std::getenv("HIERCOLL_TEST_HOW");
  const size_t count = std::strtoul(std::getenv("HIERCOLL_TEST_COUNT"), nullptr, 10);
  const int n = comm.size();
  std::vector<float> data(count);
  auto die = [&] {
    std::printf("DIED_AT %lld\n", static_cast<long long>(steady_ns()));
    std::fflush(stdout);
    if (how == "kill") raise(SIGKILL);
    if (how == "stop") raise(SIGSTOP);
    if (how == "segv") {
      rlimit none{0, 0};
      setrlimit(RLIMIT_CORE, &none);  // no core file for a crash on purpose
      std::signal(SIGSEGV, SIG_DFL);  // nor a backtrace file from a library's handler (libpmix writes *.btr)
      raise(SIGSEGV);
    }
    std::exit(1);  // static destructors run, the communicator's do not
  };
  try {
    for (int i = 0; i < 1000; ++i) {
      std::fill(data.begin(), data.end(), static_cast<float>(comm.rank() + i));
      if (comm.rank() == victim && i == die_iter && after_us < 0) die();
      Work work = comm.allreduce(data.data(), data.data(), count, DataType::kFloat32, ReduceOp::kSum);
      if (comm.rank() == victim && i == die_iter) {
        std::this_thread::sleep_for(std::chrono::microseconds(after_us));
        die();
      }
      work.wait();
      const float want = static_cast<float>(n * (n - 1) / 2 + n * i);
      for (size_t k = 0; k < count; k += 997) expect_equal("allreduce " + std::to_string(i), DataType::kFloat32,
                                                          ReduceOp::kSum, data.data(), k, want);
    }
    std::printf("FAIL: survived a dead peer\n");
    ++g_failures;
  } catch (const Error& e) {
    std::printf("NOTICED_AT %lld [%s]: %s\n", static_cast<long long>(steady_ns()), to_string(e.code()), e.what());
    if (const auto* lost = dynamic_cast<const PeerLostError*>(&e))
      std::printf("PEER_LOST rank=%d closed=%d\n", lost->rank(), lost->connection_closed() ? 1 : 0);
    const char* pid = std::strstr(e.what(), "(pid ");
    if (how == "stop" && comm.rank() == (victim == 0 ? 1 : 0) && pid != nullptr) kill(std::atoi(pid + 5), SIGKILL);
    const auto start = std::chrono::steady_clock::now();
    try {
      comm.allreduce(data.data(), data.data(), count, DataType::kFloat32, ReduceOp::kSum).wait();
      std::printf("FAIL: the operation after a peer's death succeeded\n");
      ++g_failures;
    } catch (const Error& next) {
      const auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      std::printf("NEXT FAILED in %.1f ms [%s]: %s\n", ms, to_string(next.code()), next.what());
      if (const auto* lost = dynamic_cast<const PeerLostError*>(&next))
        std::printf("NEXT PEER_LOST rank=%d\n", lost->rank());
    }
  }
}

// One-node allreduces up to 1 MB run on the caller's thread when the communicator has nothing queued, and on the
// progress thread behind queued work otherwise; which one depends on each rank's own queue, so ranks mix the two
// within one operation. Here every rank issues rounds of [a large allreduce (1.2 MB in float32, beyond the caller's
// limit; 600 KB in bfloat16, within it), a small one (one flag round), a broadcast (node memory too, either
// thread), a medium allreduce (several rounds of the node reduce-scatter and allgather), a reduce (through the
// network endpoint, whose tags count operations on both paths alike)], waiting after the first operation on
// alternate rounds and ranks, and checks every result against the serial reference.
void run_mixed_paths(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  const size_t big = 300000, small = 7, medium = 90000;
  for (int round = 0; round < 40; ++round) {
    const uint32_t seed = static_cast<uint32_t>(1000 + round);
    const DataType type = round % 3 == 0 ? DataType::kBFloat16 : DataType::kFloat32;
    const ReduceOp op = round % 2 ? ReduceOp::kSum : ReduceOp::kMax;
    Buffer big_in = make_input(r, big, type, op, seed), big_out(big * dtype_size(type));
    Buffer small_a = make_input(r, small, type, op, seed + 1), medium_in = make_input(r, medium, type, op, seed + 2);
    const int root = round % n;
    Buffer cast =
        r == root ? make_input(root, small, type, ReduceOp::kSum, seed + 3) : Buffer(small * dtype_size(type));
    Work first = comm.allreduce(big_in.data(), big_out.data(), big, type, op);
    if ((round + r) % 2 == 0) first.wait();
    Work second = comm.allreduce(small_a.data(), small_a.data(), small, type, op);
    Work third = comm.broadcast(cast.data(), cast.data(), small, type, root);
    Work fourth = comm.allreduce(medium_in.data(), medium_in.data(), medium, type, op);
    Buffer reduce_in = make_input(r, small, type, op, seed + 4), reduced(small * dtype_size(type));
    Work fifth = comm.reduce(reduce_in.data(), reduced.data(), small, type, op, root);
    for (const Work& w : {first, second, third, fourth, fifth}) w.wait();
    const std::string what = "mixed round " + std::to_string(round);
    for (size_t i = 0; i < big; ++i)
      expect_equal(what + " large", type, op, big_out.data(), i, hiercoll::test::reference_value(n, i, type, op, seed));
    for (size_t i = 0; i < small; ++i) {
      expect_equal(what + " small", type, op, small_a.data(), i,
                   hiercoll::test::reference_value(n, i, type, op, seed + 1));
    }
    for (size_t i = 0; i < medium; ++i) {
      expect_equal(what + " medium", type, op, medium_in.data(), i,
                   hiercoll::test::reference_value(n, i, type, op, seed + 2));
    }
    if (r == root) {
      for (size_t i = 0; i < small; ++i) {
        expect_equal(what + " reduce", type, op, reduced.data(), i,
                     hiercoll::test::reference_value(n, i, type, op, seed + 4));
      }
    }
    Buffer want = make_input(root, small, type, ReduceOp::kSum, seed + 3);
    for (size_t i = 0; i < small; ++i)
      expect_equal(what + " broadcast", type, ReduceOp::kSum, cast.data(), i, get(type, want.data(), i));
  }
}

// One rank stops calling collectives (alive, but stuck outside hiercoll, as a rank in a long data-loader stall or a
// deadlock of its own): the others' next allreduce times out, and its error names that rank. The hung rank writes
// its flight record on request when it wakes up, as a user would from a signal handler or a watchdog.
void run_hang(Communicator& comm) {
  const int hung = std::atoi(std::getenv("HIERCOLL_TEST_HANG_RANK") ? std::getenv("HIERCOLL_TEST_HANG_RANK") : "2");
  std::vector<float> data(1000, 1.0f);
  for (int i = 0; i < 5; ++i) {
    comm.allreduce(data.data(), data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum).wait();
  }
  if (comm.rank() == hung) {
    const char* timeout_ms = std::getenv("HIERCOLL_TIMEOUT_MS");
    std::this_thread::sleep_for(std::chrono::milliseconds(2 * std::atoi(timeout_ms ? timeout_ms : "1000") + 2000));
    if (const char* dir = std::getenv("HIERCOLL_FLIGHT_DUMP")) {
      std::FILE* file =
          std::fopen((std::string(dir) + "/hiercoll-flight-hung-" + std::to_string(hung) + ".json").c_str(), "w");
      std::fputs(comm.flight_record().c_str(), file);
      std::fclose(file);
    }
    return;
  }
  try {
    comm.allreduce(data.data(), data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum).wait();
    std::printf("FAIL: an allreduce without rank %d completed\n", hung);
    ++g_failures;
  } catch (const Error& e) {
    std::printf("EXPECTED ERROR [%s]: %s\n", to_string(e.code()), e.what());
  }
}

// Communicator::on_failure as torch's abort hooks use it. Rank HIERCOLL_TEST_HANG_RANK stops calling collectives;
// the others time out, are told before their Work fails, and abort as c10d backends do after a timeout. The idle
// rank is told too, though nothing of its own failed: that a peer aborted. Nobody is told of its own abort().
void run_failure_callback(Communicator& comm) {
  const int hung = std::atoi(std::getenv("HIERCOLL_TEST_HANG_RANK") ? std::getenv("HIERCOLL_TEST_HANG_RANK") : "2");
  std::mutex mutex;
  std::condition_variable told_cv;
  std::vector<std::pair<ErrorCode, std::string>> told;
  comm.on_failure([&](ErrorCode code, const std::string& reason) {
    std::lock_guard<std::mutex> lock(mutex);
    told.emplace_back(code, reason);
    told_cv.notify_all();
  });
  auto count = [&] {
    std::lock_guard<std::mutex> lock(mutex);
    return told.size();
  };
  std::vector<float> data(1000, 1.0f);
  for (int i = 0; i < 3; ++i) comm.allreduce(data.data(), data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum).wait();
  expect(count() == 0, "told of a failure while every collective succeeded");
  if (comm.rank() == hung) {
    std::unique_lock<std::mutex> lock(mutex);
    const bool heard = told_cv.wait_for(lock, std::chrono::seconds(60), [&] { return !told.empty(); });
    expect(heard, "the idle rank was never told that its peers failed");
    if (heard) std::printf("TOLD rank=%d code=%s reason=%s\n", comm.rank(), to_string(told[0].first), told[0].second.c_str());
    return;
  }
  try {
    comm.allreduce(data.data(), data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum).wait();
    expect(false, "an allreduce without the hung rank completed");
  } catch (const Error& e) {
    expect(count() == 1, "the failure was not told before the failed operation completed");
    std::printf("TOLD rank=%d code=%s before the error [%s]\n", comm.rank(), to_string(told[0].first), to_string(e.code()));
  }
  comm.abort();
  expect(count() == 1, "told more than once, or of this rank's own abort()");
  // Set after the failure: told at once, on this thread.
  std::pair<ErrorCode, std::string> late;
  comm.on_failure([&](ErrorCode code, const std::string& reason) { late = {code, reason}; });
  expect(late.first == told[0].first && late.second == told[0].second, "a callback set after the failure was not told it");
}

// Prints the layout the communicator found, for the test to compare with what it launched.
// The figures and sizes the communicator chose its schedules with (Communicator::tuning), exactly.
void print_tuning(const Communicator& comm) {
  const hiercoll::Tuning t = comm.tuning();
  std::printf(
      "TUNING rank=%d net_us=%.17g net_gbps=%.17g probed=%d chunk=%zu slots=%d piece=%zu overhead_us=%.17g "
      "ranks_per_cpu=%.17g yield=%d\n",
      comm.rank(), t.net_latency_us, t.net_bandwidth_gbps, t.net_probed ? 1 : 0, t.chunk_bytes, t.pipeline_slots,
      t.node_piece_bytes, t.net_overhead_us, t.ranks_per_cpu, t.flag_waits_yield ? 1 : 0);
}

void run_layout(Communicator& comm) {
  const Layout& layout = comm.layout();
  std::printf("LAYOUT rank=%d node=%d local_rank=%d local_size=%d nodes=%d algo64M=%s\n", comm.rank(), layout.node,
              layout.local_rank, layout.local_size, layout.node_count, comm.allreduce_algorithm(64 << 20).c_str());
  print_tuning(comm);
}

// Rails: every rank's NIC (Communicator::fabric_nic) gathered through the communicator. Local rank l of every node
// must run on the same NIC (rail-aligned), and the ranks of a node on min(local_size, nics) distinct NICs, `nics`
// being how many each node has (argv[2]). Then a 64 MB allreduce, checked against the serial reference, so that the
// caller (test/cluster/rails_check.sh) can count what each NIC carried. Prints "RAIL rank local nic" lines.
void run_rails(Communicator& comm, int nics) {
  constexpr size_t kName = 32;
  const Layout& layout = comm.layout();
  std::vector<uint8_t> mine(kName, 0), all(kName * static_cast<size_t>(comm.size()), 0);
  const std::string nic = comm.fabric_nic();
  std::copy_n(nic.begin(), std::min(nic.size(), kName - 1), mine.begin());
  comm.allgather(mine.data(), all.data(), kName, DataType::kUInt8).wait();
  auto nic_of = [&](int rank) { return std::string(reinterpret_cast<const char*>(&all[kName * static_cast<size_t>(rank)])); };
  std::printf("RAIL rank=%d local=%d nic=%s\n", comm.rank(), layout.local_rank, nic.c_str());
  for (int node = 0; node < layout.node_count; ++node) {
    std::vector<std::string> used;
    for (int local = 0; local < static_cast<int>(layout.node_ranks[node].size()); ++local) {
      const std::string here = nic_of(layout.rank_at(node, local)), first = nic_of(layout.rank_at(0, local));
      if (here != first) {
        std::printf("MISMATCH: local rank %d runs on %s on node %d but on %s on node 0 (not rail-aligned)\n", local,
                    here.c_str(), node, first.c_str());
        ++g_failures;
      }
      // A rank names its NICs comma-separated where it stripes over several.
      for (size_t begin = 0; begin <= here.size();) {
        const size_t end = std::min(here.find(',', begin), here.size());
        const std::string one = here.substr(begin, end - begin);
        if (std::find(used.begin(), used.end(), one) == used.end()) used.push_back(one);
        begin = end + 1;
      }
    }
    // Every NIC, whether the node's ranks outnumber its NICs (they share them) or not (each stripes over its share).
    if (used.size() != static_cast<size_t>(nics)) {
      std::printf("MISMATCH: node %d's %zu ranks use %zu NIC(s), not all %d\n", node, layout.node_ranks[node].size(),
                  used.size(), nics);
      ++g_failures;
    }
  }
  const size_t count = (size_t{64} << 20) / sizeof(float);
  const uint32_t seed = 7;
  Buffer in = make_input(comm.rank(), count, DataType::kFloat32, ReduceOp::kSum, seed);
  comm.allreduce(in.data(), in.data(), count, DataType::kFloat32, ReduceOp::kSum).wait();
  for (size_t i = 0; i < count; ++i) {
    expect_equal("rails allreduce", DataType::kFloat32, ReduceOp::kSum, in.data(), i,
                 hiercoll::test::reference_value(comm.size(), i, DataType::kFloat32, ReduceOp::kSum, seed));
  }
}

// After an operation the progress thread ran (an allreduce past the caller-run limit), the next small one runs on
// its caller's thread again, every time. Pinned to one CPU, as hiercoll_launch pins a rank, so that the caller
// and the progress thread share a core: the progress thread's wake-up of the caller hands the core over at once,
// and a progress thread that finished the Work before giving the caller its turn back kept every later call
// (bug: about 1 run in 6 of a 2-rank 8 B allreduce at 5x its time). Prints "PROGRESS_RUN <n>": how many of the
// small allreduces the record shows on the progress thread.
void run_turn_returns(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) > 0) {
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[static_cast<size_t>(r) % cpus.size()], &one);
    if (DIR* tasks = opendir("/proc/self/task")) {  // every thread: the communicator's are running already
      while (dirent* task = readdir(tasks)) {
        if (task->d_name[0] != '.') sched_setaffinity(std::atoi(task->d_name), sizeof one, &one);
      }
      closedir(tasks);
    }
  }
  const size_t big = (size_t{2} << 20) / sizeof(float), small = 3;
  const int rounds = 10, per_round = 50;  // 10 x 51 collectives: within the record's 600 (HIERCOLL_FLIGHT_ENTRIES)
  for (int round = 0; round < rounds; ++round) {
    const uint32_t seed = static_cast<uint32_t>(7000 + round);
    Buffer big_in = make_input(r, big, DataType::kFloat32, ReduceOp::kSum, seed);
    comm.allreduce(big_in.data(), big_in.data(), big, DataType::kFloat32, ReduceOp::kSum).wait();
    for (size_t i = 0; i < big; i += 4099) {
      expect_equal("turn round " + std::to_string(round) + " large", DataType::kFloat32, ReduceOp::kSum, big_in.data(),
                   i, hiercoll::test::reference_value(n, i, DataType::kFloat32, ReduceOp::kSum, seed));
    }
    for (int k = 0; k < per_round; ++k) {
      const uint32_t small_seed = seed * 100 + static_cast<uint32_t>(k);
      Buffer in = make_input(r, small, DataType::kFloat32, ReduceOp::kSum, small_seed), out(small * sizeof(float));
      comm.allreduce(in.data(), out.data(), small, DataType::kFloat32, ReduceOp::kSum).wait();
      for (size_t i = 0; i < small; ++i) {
        expect_equal("turn round " + std::to_string(round) + " small", DataType::kFloat32, ReduceOp::kSum, out.data(),
                     i, hiercoll::test::reference_value(n, i, DataType::kFloat32, ReduceOp::kSum, small_seed));
      }
    }
  }
  // Entries look like {"seq": 12, "op": "allreduce(3 x float32, sum) [...]", "state": "done", "thread": "caller", ...}
  const std::string record = comm.flight_record();
  int small_ops = 0, on_progress = 0;
  for (size_t at = record.find("{\"seq\""); at != std::string::npos;) {
    const size_t next = record.find("{\"seq\"", at + 1);
    const std::string entry = record.substr(at, next == std::string::npos ? std::string::npos : next - at);
    if (entry.find("allreduce(" + std::to_string(small) + " ") != std::string::npos) {
      ++small_ops;
      if (entry.find("\"thread\": \"progress\"") != std::string::npos) ++on_progress;
    }
    at = next;
  }
  if (small_ops != rounds * per_round) {
    std::printf("MISMATCH: the flight record shows %d small allreduces, not %d\n", small_ops, rounds * per_round);
    ++g_failures;
  }
  std::printf("PROGRESS_RUN %d\n", on_progress);
}

// The allreduce algorithm this rank chooses at sizes 8 B x 8^k up to 128 MB, on one line.
void run_choices(Communicator& comm) {
  std::string line = "CHOICES";
  for (size_t bytes = 8; bytes <= (128u << 20); bytes *= 8) line += " " + comm.allreduce_algorithm(bytes);
  std::printf("%s\n", line.c_str());
  print_tuning(comm);
}

// With the mismatch check on, ranks that call different collectives all get a clear error.
void run_check_mismatch(Communicator& comm) {
  std::vector<float> a(100, 1.0f);
  try {
    if (comm.rank() == 0) {
      comm.broadcast(a.data(), a.data(), a.size(), DataType::kFloat32, 0).wait();
    } else {
      comm.allreduce(a.data(), a.data(), a.size(), DataType::kFloat32, ReduceOp::kSum).wait();
    }
    std::printf("FAIL: mismatched collectives completed\n");
    ++g_failures;
  } catch (const InvalidUsageError& e) {
    std::printf("EXPECTED ERROR [%s]: %s\n", to_string(e.code()), e.what());
  }
}

// Another communicator over the job's store, named `name` (each rank of it calls this with the same name).
Communicator named_communicator(const std::string& name, int rank, int size) {
  CommOptions options = CommOptions::from_env();
  options.name = name;
  return Communicator::create(open_store(std::getenv("HIERCOLL_STORE"), rank, options.timeout), rank, size, options);
}

// Elastic restart: rank HIERCOLL_TEST_DIE_RANK dies mid-allreduce; the survivors see the error, abort the
// communicator, form a new one without the dead rank through the same store, and carry on.
void run_elastic(Communicator& comm) {
  const int dead = std::atoi(std::getenv("HIERCOLL_TEST_DIE_RANK"));
  const int old_rank = comm.rank(), old_size = comm.size();
  std::vector<float> data(1u << 20, 1.0f);
  try {
    for (int i = 0; i < 20; ++i) {
      if (old_rank == dead && i == 2) raise(SIGKILL);
      comm.allreduce(data.data(), data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum).wait();
    }
    std::printf("FAIL: survived a dead peer\n");
    ++g_failures;
    return;
  } catch (const Error& e) {
    std::printf("first communicator failed as expected: %s\n", e.what());
  }
  comm.abort();
  int new_rank = old_rank - (old_rank > dead ? 1 : 0), new_size = old_size - 1;
  Communicator again = named_communicator("restart", new_rank, new_size);
  std::vector<double> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>(new_rank * 1000 + i);
  again.allreduce(x.data(), x.data(), x.size(), DataType::kFloat64, ReduceOp::kSum).wait();
  for (size_t i = 0; i < x.size(); ++i) {
    double want = 0;
    for (int r = 0; r < new_size; ++r) want += static_cast<double>(r * 1000 + i);
    expect_equal("allreduce after restart", DataType::kFloat64, ReduceOp::kSum, x.data(), i, want);
  }
  std::printf("restarted as rank %d of %d\n", new_rank, new_size);
}

// Waits asleep in the network end when they must, not at the end of their sleep slice (50 ms): rank 1 of 2 (on
// nodes of their own, so the data path is the fabric) times, three times each, (a) how long after abort() a
// collective asleep in the network fails, (b) the same for a receive the progress thread sleeps on, and (c) how long
// a collective takes when it is issued while the progress thread sleeps on a pending receive and rank 0 is already
// waiting. Each starts 225 ms after the wait began: a quarter of a slice past its start, so a wake-up that does not
// come shows as about 25 ms. Prints "WAKE_MS <kind> <ms>" per trial.
// Rank 0 comes 300 ms late to each of 3 small allreduces; every rank prints the CPU its process spent over them per
// second of wall time ("LATE_WAIT rank cpu_per_s"): a waiting rank's wait must sleep, whatever the provider.
void run_late_wait(Communicator& comm) {
  std::vector<float> data(2, 1.0f);
  comm.allreduce(data.data(), data.data(), 2, DataType::kFloat32, ReduceOp::kSum).wait();  // connected first
  auto cpu_s = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
  };
  const double cpu0 = cpu_s();
  const int64_t start = steady_ns();
  for (int k = 0; k < 3; ++k) {
    if (comm.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    comm.allreduce(data.data(), data.data(), 2, DataType::kFloat32, ReduceOp::kSum).wait();
  }
  std::printf("LATE_WAIT %d %.4f\n", comm.rank(), (cpu_s() - cpu0) / ((steady_ns() - start) * 1e-9));
}

void run_wake(Communicator& comm) {
  using Ms = std::chrono::duration<double, std::milli>;
  const auto slice_phase = std::chrono::milliseconds(225);
  const int rank = comm.rank();
  std::vector<float> data(2, 1.0f);
  auto fresh = [&](const std::string& name) { return named_communicator(name, rank, comm.size()); };
  // Until `work` fails after abort(): rank 1 aborts a communicator rank 0 never calls.
  auto after_abort = [&](const char* kind, Communicator& c, Work work) {
    std::atomic<int64_t> done_ns{0};
    work.on_completion([&] { done_ns = steady_ns(); });
    std::this_thread::sleep_for(slice_phase);
    const int64_t abort_ns = steady_ns();
    c.abort();
    if (!work.is_completed() || work.error() == nullptr) {
      std::printf("FAIL: %s: not failed by abort()\n", kind);
      ++g_failures;
      return;
    }
    std::printf("WAKE_MS %s %.3f\n", kind, (done_ns - abort_ns) / 1e6);
  };
  for (int trial = 0; trial < 3; ++trial) {
    Communicator a = fresh("wake-collective-" + std::to_string(trial));
    if (rank == 1)
      after_abort("collective", a, a.allreduce(data.data(), data.data(), 2, DataType::kFloat32, ReduceOp::kSum));
    Communicator b = fresh("wake-recv-" + std::to_string(trial));
    if (rank == 1) after_abort("recv", b, b.recv(data.data(), 2, DataType::kFloat32, 0, 9));
    comm.barrier().wait();  // rank 0 keeps its halves alive until rank 1 is done with them
  }
  Communicator c = fresh("wake-push");
  std::vector<float> message(2, 0.0f);
  Work pending = rank == 1 ? c.recv(message.data(), 2, DataType::kFloat32, 0, 5) : Work();
  for (int trial = 0; trial < 3; ++trial) {
    if (rank == 1) std::this_thread::sleep_for(slice_phase);  // rank 0 is waiting already
    const auto start = std::chrono::steady_clock::now();
    c.allreduce(data.data(), data.data(), 2, DataType::kFloat32, ReduceOp::kSum).wait();
    if (rank == 1) std::printf("WAKE_MS push %.3f\n", Ms(std::chrono::steady_clock::now() - start).count());
  }
  if (rank == 0) c.send(data.data(), 2, DataType::kFloat32, 1, 5).wait();
  if (rank == 1) pending.wait();
}

// One node: rank 1's allreduce, which rank 0 never joins, runs on rank 1's calling thread and sleeps on a shared-memory
// flag; another thread aborts the communicator once the sleeper's slices have grown (225 ms in). Prints, as run_wake
// does, how long after the abort the call returned its error.
void run_wake_node(Communicator& comm) {
  const int rank = comm.rank();
  std::vector<float> data(2, 1.0f);
  for (int trial = 0; trial < 3; ++trial) {
    Communicator a = named_communicator("wake-node-" + std::to_string(trial), rank, comm.size());
    if (rank == 1) {
      std::atomic<int64_t> abort_ns{0};
      std::thread aborter([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(225));
        abort_ns = steady_ns();
        a.abort();
      });
      bool failed = false;
      try {
        a.allreduce(data.data(), data.data(), 2, DataType::kFloat32, ReduceOp::kSum).wait();
      } catch (const Error&) {
        failed = true;
      }
      const int64_t done_ns = steady_ns();
      aborter.join();
      if (!failed) {
        std::printf("FAIL: collective: not failed by abort()\n");
        ++g_failures;
      }
      std::printf("WAKE_MS collective %.3f\n", (done_ns - abort_ns) / 1e6);
    }
    comm.barrier().wait();
  }
}

int count_open_fds() {
  int count = 0;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (readdir(dir)) ++count;
    closedir(dir);
  }
  return count;
}

// This process's TCP connections in CLOSE_WAIT (the peer hung up, we have not closed), counted by local port: on a
// listener's port, connections that server failed to drop.
std::map<int, int> hung_up_connections() {
  std::map<int, int> by_port;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (dirent* entry = readdir(dir)) {
      const int fd = std::atoi(entry->d_name);
      sockaddr_in local{};
      socklen_t length = sizeof(local);
      tcp_info info{};
      socklen_t info_length = sizeof(info);
      if (entry->d_name[0] == '.' || getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) != 0 ||
          local.sin_family != AF_INET || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &info_length) != 0 ||
          info.tcpi_state != 8 /* TCP_CLOSE_WAIT */) {
        continue;
      }
      ++by_port[ntohs(local.sin_port)];
    }
    closedir(dir);
  }
  return by_port;
}

// Soak: many collectives of random kind, type, op, size and root (every rank draws the same sequence),
// each checked against the serial reference; afterwards no file descriptors may have leaked.
void run_soak(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  const int iterations =
      std::atoi(std::getenv("HIERCOLL_SOAK_ITERATIONS") ? std::getenv("HIERCOLL_SOAK_ITERATIONS") : "2000");
  comm.barrier().wait();
  const int fds_before = count_open_fds();
  std::mt19937_64 rng(12345);  // same seed everywhere: all ranks issue the same sequence
  long checked_bytes = 0;
  int done = 0, injected = 0, caught = 0;
  for (int it = 0; it < iterations; ++it) {
    if (it % 50 == 0) {  // inject bad input: it must be refused and change nothing
      ++injected;
      try {
        comm.reduce(nullptr, nullptr, 10, DataType::kFloat32, ReduceOp::kSum, n + it % 3);
      } catch (const InvalidUsageError&) {
        ++caught;
      }
    }
    const auto& types = hiercoll::test::all_types();
    DataType type = types[rng() % types.size()];
    ReduceOp op = static_cast<ReduceOp>(rng() % (is_floating(type) ? 5 : 4));
    size_t count = rng() % 4 == 0 ? rng() % 70000 : rng() % 300;
    int root = static_cast<int>(rng() % static_cast<uint64_t>(n));
    int kind = static_cast<int>(rng() % 6);
    uint32_t seed = static_cast<uint32_t>(rng());
    size_t elem = dtype_size(type);
    std::string what = name("soak", type, op, count, false) + " kind " + std::to_string(kind);
    switch (kind) {
      case 0: {
        Buffer in = make_input(r, count, type, op, seed), out(count * elem);
        comm.allreduce(in.data(), out.data(), count, type, op).wait();
        for (size_t i = 0; i < count; ++i)
          expect_equal(what, type, op, out.data(), i, hiercoll::test::reference_value(n, i, type, op, seed));
        break;
      }
      case 1: {
        Buffer in = make_input(r, count * n, type, op, seed), out(count * elem);
        comm.reduce_scatter(in.data(), out.data(), count, type, op).wait();
        for (size_t i = 0; i < count; ++i)
          expect_equal(what, type, op, out.data(), i,
                       hiercoll::test::reference_value(n, r * count + i, type, op, seed));
        break;
      }
      case 2: {
        Buffer in = make_input(r, count, type, ReduceOp::kSum, seed), out(count * elem * n);
        comm.allgather(in.data(), out.data(), count, type).wait();
        for (int j = 0; j < n; ++j) {
          Buffer want = make_input(j, count, type, ReduceOp::kSum, seed);
          for (size_t i = 0; i < count; ++i)
            expect_equal(what, type, ReduceOp::kSum, out.data(), j * count + i, get(type, want.data(), i));
        }
        count *= n;
        break;
      }
      case 3: {
        Buffer data = r == root ? make_input(root, count, type, ReduceOp::kSum, seed) : Buffer(count * elem);
        comm.broadcast(data.data(), data.data(), count, type, root).wait();
        Buffer want = make_input(root, count, type, ReduceOp::kSum, seed);
        for (size_t i = 0; i < count; ++i)
          expect_equal(what, type, ReduceOp::kSum, data.data(), i, get(type, want.data(), i));
        break;
      }
      case 4: {
        Buffer in = make_input(r, count, type, op, seed), out(count * elem);
        comm.reduce(in.data(), out.data(), count, type, op, root).wait();
        if (r == root) {
          for (size_t i = 0; i < count; ++i)
            expect_equal(what, type, op, out.data(), i, hiercoll::test::reference_value(n, i, type, op, seed));
        }
        break;
      }
      default: {
        Buffer in = make_input(r, count * n, type, ReduceOp::kSum, seed), out(count * elem * n);
        comm.alltoall(in.data(), out.data(), count, type).wait();
        for (int j = 0; j < n; ++j) {
          Buffer want = make_input(j, count, type, ReduceOp::kSum, seed, r * count);
          for (size_t i = 0; i < count; ++i)
            expect_equal(what, type, ReduceOp::kSum, out.data(), j * count + i, get(type, want.data(), i));
        }
        count *= n;
      }
    }
    checked_bytes += static_cast<long>(count * elem);
    ++done;
  }
  comm.barrier().wait();
  const char* fuzz_dir = std::getenv("HIERCOLL_TEST_FUZZ_DIR");
  int fds_after = fuzz_dir ? fds_before : count_open_fds();  // with a fuzzer: counted once it has stopped, below
  if (fuzz_dir) {
    // A fuzzer is connecting to the job's listening sockets while the soak runs (mp_tests.cpp): tell it the soak
    // is over, wait until it has stopped and closed its connections, then give the listeners a moment to drop what
    // they still hold. Anything held after that is a leak.
    const std::string dir = fuzz_dir;
    // hiercoll's own listeners (the TCP store, the peer watch's hub) must have dropped every connection whose
    // stranger hung up. Where the fuzzer reached every listener (HIERCOLL_TEST_FUZZ_LISTENERS), libfabric's tcp
    // provider keeps a stranger's connection that never sent a connection request until the endpoint closes
    // (docs/reliability.md): those, each a descriptor of this process, are left out of the count, and any other
    // descriptor more than before is a leak. The count is taken once the fuzzer has stopped (counted while it ran,
    // the store's connection to it was counted too).
    const std::string store = std::getenv("HIERCOLL_STORE");  // tcp://127.0.0.1:port (LaunchOptions::tcp_store)
    const int store_port = std::atoi(store.c_str() + store.rfind(':') + 1);
    const char* token = std::getenv("HIERCOLL_JOB_TOKEN");
    auto client = std::make_shared<TcpStore>("127.0.0.1", static_cast<uint16_t>(store_port), false,
                                             std::chrono::seconds(30), token ? token : "");
    const std::string contact = client->get_string("hiercoll/world#0/watch");  // "token port addresses"
    const int watch_port = std::atoi(contact.c_str() + contact.find(' ') + 1);
    client.reset();  // before the barriers below: no rank counts another's store client still closing
    std::fclose(std::fopen((dir + "/soak-done-" + std::to_string(r)).c_str(), "w"));
    for (int i = 0; i < 600 && access((dir + "/fuzz-done").c_str(), F_OK) != 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    for (int i = 0; i < 20; ++i) {
      comm.barrier().wait();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::map<int, int> held = hung_up_connections();
    // Counted before the last barrier: past it, a rank that has finished destroys its communicator and hangs up on
    // the peer watch's hub, which may not have read its goodbye by the time this rank counts (on a loaded machine,
    // 1 run in 8-20: the connection "held" on the watch's port was a rank's, not a stranger's).
    comm.barrier().wait();
    const int store_held = held[store_port], watch_held = held[watch_port];
    int libfabric_held = 0;
    for (const auto& [port, count] : held) libfabric_held += port == store_port || port == watch_port ? 0 : count;
    std::printf("LISTENERS: hung-up connections held: %d by the store (port %d), %d by the peer watch (port %d), %d "
                "by libfabric\n", store_held, store_port, watch_held, watch_port, libfabric_held);
    if (store_held > 0 || watch_held > 0) {
      std::printf("FAIL: connections their strangers closed held by the store (%d) and the peer watch (%d)\n",
                  store_held, watch_held);
      ++g_failures;
    }
    fds_after = count_open_fds() - (std::getenv("HIERCOLL_TEST_FUZZ_LISTENERS") ? libfabric_held : 0);
  }
  std::printf("SOAK rank %d: %d collectives, %ld bytes checked, %d bad calls injected, %d caught, fds %d -> %d\n", r,
              done, checked_bytes, injected, caught, fds_before, fds_after);
  if (caught != injected) {
    std::printf("FAIL: %d injected bad calls were not refused\n", injected - caught);
    ++g_failures;
  }
  if (fds_after > fds_before) {
    std::printf("FAIL: %d file descriptors leaked\n", fds_after - fds_before);
    ++g_failures;
  }
}

// Gradient bucketing: results equal an unbucketed allreduce and the serial reference, buckets respect the
// caps and types, the first bucket is launched before the last gradient is ready, and after the first
// iteration buckets follow rank 0's ready order even when ranks mark gradients ready in different orders.
void run_bucketer(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  const std::vector<std::pair<size_t, DataType>> shapes = {
      {1000, DataType::kFloat32},   {70000, DataType::kFloat32}, {3, DataType::kFloat64},
      {20000, DataType::kBFloat16}, {5000, DataType::kFloat32},  {300000, DataType::kFloat32},
      {1, DataType::kFloat32},      {40000, DataType::kFloat64}, {12345, DataType::kBFloat16},
      {8, DataType::kFloat32},      {65536, DataType::kFloat32}, {0, DataType::kFloat32}};
  std::vector<Buffer> storage;
  std::vector<GradientSpec> specs;
  for (const auto& [count, type] : shapes) {
    storage.emplace_back(count * dtype_size(type));
    specs.push_back({storage.back().data(), count, type});
  }
  BucketerOptions options;
  options.first_bucket_bytes = 64 << 10;
  options.bucket_cap_bytes = 256 << 10;
  GradientBucketer bucketer(comm, specs, options);

  auto check_layout = [&](const char* when) {
    std::vector<int> seen(specs.size(), 0);
    const auto& buckets = bucketer.buckets();
    for (size_t b = 0; b < buckets.size(); ++b) {
      size_t bytes = 0;
      for (size_t g : buckets[b]) {
        ++seen[g];
        bytes += specs[g].count * dtype_size(specs[g].type);
        if (specs[g].type != specs[buckets[b].front()].type) {
          std::printf("FAIL %s: bucket %zu mixes types\n", when, b);
          ++g_failures;
        }
      }
      size_t cap = b == 0 ? options.first_bucket_bytes : options.bucket_cap_bytes;
      if (buckets[b].size() > 1 && bytes > cap) {
        std::printf("FAIL %s: bucket %zu holds %zu bytes over its cap %zu\n", when, b, bytes, cap);
        ++g_failures;
      }
    }
    for (size_t g = 0; g < specs.size(); ++g) {
      if (seen[g] != 1) {
        std::printf("FAIL %s: gradient %zu is in %d buckets\n", when, g, seen[g]);
        ++g_failures;
      }
    }
  };
  check_layout("initial");
  // Registration order reversed: the last gradients come first.
  if (bucketer.buckets().front().front() != specs.size() - 1) {
    std::printf("FAIL: the first bucket does not start with the last registered gradient\n");
    ++g_failures;
  }

  for (int iteration = 0; iteration < 3; ++iteration) {
    uint32_t seed = 1000 + static_cast<uint32_t>(iteration);
    size_t offset = 0;
    std::vector<Buffer> unbucketed;
    for (size_t g = 0; g < specs.size(); ++g) {
      for (size_t i = 0; i < specs[g].count; ++i) {
        put(specs[g].type, specs[g].data, i, input_value(r, offset + i, specs[g].type, ReduceOp::kAvg, seed));
      }
      unbucketed.emplace_back(specs[g].count * dtype_size(specs[g].type));
      comm.allreduce(specs[g].data, unbucketed.back().data(), specs[g].count, specs[g].type, ReduceOp::kAvg).wait();
      offset += specs[g].count;
    }
    // Iterations 0 and 1: every rank marks gradients ready in one shuffled order P (after iteration 0 the
    // buckets follow P); iteration 2: every rank in its own order.
    std::vector<size_t> order(specs.size());
    for (size_t g = 0; g < order.size(); ++g) order[g] = specs.size() - 1 - g;
    std::mt19937 shuffle(iteration < 2 ? 7u : 7u + static_cast<unsigned>(r) * 31u);
    std::shuffle(order.begin(), order.end(), shuffle);
    for (size_t g : order) bucketer.mark_ready(g);
    bucketer.finish();

    offset = 0;
    for (size_t g = 0; g < specs.size(); ++g) {
      std::string what = "bucketed gradient " + std::to_string(g) + " iteration " + std::to_string(iteration);
      for (size_t i = 0; i < specs[g].count; ++i) {
        expect_equal(what, specs[g].type, ReduceOp::kAvg, specs[g].data, i,
                     hiercoll::test::reference_value(n, offset + i, specs[g].type, ReduceOp::kAvg, seed));
        expect_equal(what + " vs unbucketed", specs[g].type, ReduceOp::kSum, specs[g].data, i,
                     get(specs[g].type, unbucketed[g].data(), i));
      }
      offset += specs[g].count;
    }
    // Overlap, once buckets follow the ready order: the first bucket was launched before the last gradient
    // was marked ready.
    const auto& events = bucketer.events();
    auto first_launch = std::find_if(events.begin(), events.end(), [](const auto& e) {
      return e.kind == GradientBucketer::Event::kLaunch && e.index == 0;
    });
    auto last_ready = std::find_if(events.rbegin(), events.rend(),
                                   [](const auto& e) { return e.kind == GradientBucketer::Event::kReady; });
    if (iteration == 1 &&
        (first_launch == events.end() || last_ready == events.rend() || !(first_launch->time < last_ready->time))) {
      std::printf("FAIL iteration %d: the first bucket did not start before the last gradient was ready\n", iteration);
      ++g_failures;
    }
    if (iteration == 0) {
      check_layout("rebuilt");
      std::vector<size_t> rank0_order(specs.size());
      for (size_t g = 0; g < specs.size(); ++g) rank0_order[g] = specs.size() - 1 - g;
      std::mt19937 rank0(7u);
      std::shuffle(rank0_order.begin(), rank0_order.end(), rank0);
      if (bucketer.buckets().front().front() != rank0_order.front()) {
        std::printf("FAIL: rebuilt buckets do not start with rank 0's first ready gradient\n");
        ++g_failures;
      }
    }
  }
  std::printf("bucketer: %zu buckets after rebuild\n", bucketer.buckets().size());
}

// What start-up costs the store's server: rank 0 serves the job's TcpStore (hiercoll_launch --tcp-store) and says
// how many requests it answered for its communicator's creation and one allreduce, and how long its create took.
int run_store_requests() {
  hiercoll::Rendezvous job = hiercoll::rendezvous_from_env();
  const auto start = std::chrono::steady_clock::now();
  auto since_start = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  };
  Communicator comm = Communicator::create(job.store, job.rank, job.size, hiercoll::CommOptions::from_env());
  const double create_ms = since_start();
  float x = 1.0f;
  comm.allreduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum).wait();
  const double allreduce_ms = since_start();
  if (x != static_cast<float>(job.size)) {
    std::printf("FAIL: allreduce gave %g, want %d\n", x, job.size);
    return 1;
  }
  // A token around the ring of ranks: point to point, over the fabric (opened after create on one host).
  const int32_t got = pass_ring_token(comm, 9);
  const double fabric_ms = since_start();
  if (got != (job.rank + job.size - 1) % job.size) {
    std::printf("FAIL: rank %d got token %d\n", job.rank, got);
    return 1;
  }
  // Every rank has done its ring (and so read every address) once this allreduce passes: the count below is whole.
  comm.allreduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum).wait();
  if (auto* tcp = dynamic_cast<hiercoll::TcpStore*>(job.store.get()); tcp != nullptr && job.rank == 0)
    std::printf("STORE_REQUESTS %llu CREATE_MS %.1f FIRST_ALLREDUCE_MS %.1f FIRST_P2P_MS %.1f\n",
                static_cast<unsigned long long>(tcp->requests_served()), create_ms, allreduce_ms, fabric_ms);
  return 0;
}

// A judge of silence held off the CPU past its own heartbeat timeout must not, once it runs again, report the
// ranks whose heartbeats wait unread in its sockets. Rank 0 (the peer watch's hub, which judges every rank) gives up on
// a silent rank after 2 s, the others after 30 s (so they beat every second and never judge rank 0 here); rank 0 is
// stopped for 3 s (a child process wakes it), then every rank runs allreduces that must all succeed, checked.
int run_stall() {
  hiercoll::Rendezvous job = hiercoll::rendezvous_from_env();
  setenv("HIERCOLL_HEARTBEAT_TIMEOUT_MS", job.rank == 0 ? "2000" : "30000", 1);
  Communicator comm = Communicator::create(job.store, job.rank, job.size, hiercoll::CommOptions::from_env());
  auto checked_allreduce = [&](int round) {
    float x = static_cast<float>(comm.rank() + round);
    comm.allreduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum).wait();
    const float want = static_cast<float>(job.size * (job.size - 1) / 2 + job.size * round);
    if (x != want) {
      std::printf("FAIL: allreduce %d gave %g, want %g\n", round, x, want);
      ++g_failures;
    }
  };
  checked_allreduce(0);
  if (job.rank == 0) {
    const pid_t self = getpid();
    const pid_t waker = fork();
    if (waker == 0) {  // only async-signal-safe calls in the child of a threaded process
      const timespec stall{3, 0};
      nanosleep(&stall, nullptr);
      kill(self, SIGCONT);
      _exit(0);
    }
    raise(SIGSTOP);
    waitpid(waker, nullptr, 0);
  }
  for (int round = 1; round <= 3; ++round) checked_allreduce(round);
  std::printf("rank %d ran on after rank 0's stall\n", job.rank);
  return g_failures == 0 ? 0 : 1;
}

// Every collective at scale (scripts/study/scale-processes: 128 and 256 processes, 16 emulated nodes x 4), checked
// against the serial reference as the thread-rank test checks it (test/common/collective_checks.hpp).
void run_scale(Communicator& comm) {
  namespace scale = hiercoll::test::scale;
  constexpr size_t kCount = 4099;
  const scale::Reference reference = scale::make_reference(comm.size(), kCount);
  scale::Verdict verdict;
  scale::Steps steps;
  scale::run_collectives(comm, reference, kCount, verdict, steps);
  if (verdict.failed()) {
    std::printf("FAIL: %s\n", verdict.first_failure.c_str());
    ++g_failures;
  } else if (comm.rank() == 0) {
    std::printf("scale: %d ranks on %d nodes, every collective matched the serial reference\n", comm.size(),
                comm.layout().node_count);
  }
}

// The open-file limit a communicator left this process with (test/limits/descriptors.sh).
void print_limits(Communicator& comm) {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  std::printf("rank %d NOFILE soft %llu hard %llu\n", comm.rank(), static_cast<unsigned long long>(limit.rlim_cur),
              static_cast<unsigned long long>(limit.rlim_max));
}

}  // namespace

namespace {

// The scenarios that run on a communicator made from the environment: name, what runs (with the arguments after the
// name). The others (store-requests, stall, providers) make none or their own (main).
struct Scenario {
  const char* name;
  void (*run)(Communicator& comm, int argc, char** argv);
};

const Scenario kScenarios[] = {
    {"allreduce",
     [](Communicator& c, int argc, char** argv) { run_allreduce(c, argc > 2 && std::string(argv[2]) == "--large"); }},
    {"collectives", [](Communicator& c, int, char**) { run_collectives(c); }},
    {"errors", [](Communicator& c, int, char**) { run_errors(c); }},
    {"mismatch", [](Communicator& c, int, char**) { run_mismatch(c); }},
    {"die", [](Communicator& c, int, char**) { run_die(c); }},
    {"die-remap", [](Communicator& c, int, char**) { run_die_remap(c); }},
    {"mr-pages", [](Communicator& c, int, char**) { run_mr_pages(c); }},
    {"addresses", [](Communicator& c, int, char**) { run_addresses(c); }},
    {"subgroups", [](Communicator& c, int, char**) { run_subgroups(c); }},
    {"die-after-create", [](Communicator& c, int, char**) { run_die_after_create(c); }},
    {"die-timed", [](Communicator& c, int, char**) { run_die_timed(c); }},
    {"hang", [](Communicator& c, int, char**) { run_hang(c); }},
    {"failure-callback", [](Communicator& c, int, char**) { run_failure_callback(c); }},
    {"mixed-paths", [](Communicator& c, int, char**) { run_mixed_paths(c); }},
    {"check-mismatch", [](Communicator& c, int, char**) { run_check_mismatch(c); }},
    {"elastic", [](Communicator& c, int, char**) { run_elastic(c); }},
    {"wake", [](Communicator& c, int, char**) { run_wake(c); }},
    {"late-wait", [](Communicator& c, int, char**) { run_late_wait(c); }},
    {"wake-node", [](Communicator& c, int, char**) { run_wake_node(c); }},
    {"soak", [](Communicator& c, int, char**) { run_soak(c); }},
    {"bucketer", [](Communicator& c, int, char**) { run_bucketer(c); }},
    {"layout", [](Communicator& c, int, char**) { run_layout(c); }},
    {"choices", [](Communicator& c, int, char**) { run_choices(c); }},
    {"rails", [](Communicator& c, int argc, char** argv) { run_rails(c, argc > 2 ? std::atoi(argv[2]) : 1); }},
    {"turn-returns", [](Communicator& c, int, char**) { run_turn_returns(c); }},
    {"hello",
     [](Communicator& c, int, char**) {
       std::printf("rank %d of %d\n", c.rank(), c.size());
       print_tuning(c);
     }},
    {"limits", [](Communicator& c, int, char**) { print_limits(c); }},
    {"scale", [](Communicator& c, int, char**) { run_scale(c); }},
    {"nic", [](Communicator& c, int, char**) { std::printf("rank %d NIC %s\n", c.rank(), c.fabric_nic().c_str()); }},
};

const Scenario* scenario_named(const std::string& name) {
  for (const Scenario& s : kScenarios) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

}  // namespace

namespace {

// HIERCOLL_TEST_BACKTRACE=1: a crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) prints the crashing thread's stack
// to stderr, then ends the process by the same signal. For the tests whose ranks could meet a crash rarely and under
// load (the partition and fault tests): the stack is in the test's log the one time it happens. Off by default, as
// the library installs no handler (test/launch/signal_in_collective.sh).
void report_crash(int sig) {
  static const char kHeader[] = "CRASH: stack of the thread that received the signal:\n";
  (void)!write(STDERR_FILENO, kHeader, sizeof kHeader - 1);
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  std::signal(sig, SIG_DFL);
  raise(sig);
}

void report_crashes_if_asked() {
  const char* asked = std::getenv("HIERCOLL_TEST_BACKTRACE");
  if (asked == nullptr || std::string(asked) != "1") return;
  void* warm[1];
  backtrace(warm, 1);  // loads libgcc's unwinder now, not inside the handler
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, report_crash);
}

}  // namespace

int main(int argc, char** argv) {
  report_crashes_if_asked();
  std::string scenario = argc > 1 ? argv[1] : "allreduce";
  int rank = -1;  // for the error line: known once the communicator is made
  try {
    if (scenario == "store-requests") return run_store_requests();
    if (scenario == "stall") return run_stall();
    if (scenario == "providers") {  // what the libfabric this process loads offers, on one line
      std::string line = "PROVIDERS";
      for (const std::string& provider : hiercoll::runtime_report().providers) line += " " + provider;
      std::printf("%s\n", line.c_str());
      return 0;
    }
    const Scenario* chosen = scenario_named(scenario);
    if (chosen == nullptr) {
      std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
      return 2;
    }
    std::optional<Communicator> holder(Communicator::from_env());
    // Again: loading libfabric may have replaced the handlers (libinfinipath installs its own, which the library
    // then gives back their default: transport/fabric/foreign_handlers.cpp).
    report_crashes_if_asked();
    Communicator& comm = *holder;
    rank = comm.rank();
    chosen->run(comm, argc, argv);
    // How long the communicator takes to go (a survivor's, after a peer's death, is bounded: mp_tests.cpp).
    const int64_t destroy_start = steady_ns();
    holder.reset();
    std::printf("DESTROYED in %.1f ms\n", (steady_ns() - destroy_start) / 1e6);
  } catch (const PeerLostError& e) {
    // Which peer, and when (the wall clock, so that a script can time the error against a fault it caused).
    const long long now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch()).count();
    std::printf("ERROR [%s]: %s\nLOST rank %d peer %d %s at_ms %lld\n", to_string(e.code()), e.what(), rank, e.rank(),
                e.connection_closed() ? "closed" : "silent", now_ms);
    return 3;
  } catch (const Error& e) {
    std::printf("ERROR [%s]: %s\n", to_string(e.code()), e.what());
    return 3;
  }
  std::printf("%s: %d mismatches\n", scenario.c_str(), g_failures);
  return g_failures == 0 ? 0 : 1;
}
