#include "store/gather.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "base/text.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll::store {

Store::Bytes get_waiting(Store& store, const std::string& key, const StartupWait& wait,
                         const std::function<std::string()>& missing, const std::function<void()>& on_slow) {
  auto slice = wait.first_slice;
  for (int attempt = 0;; ++attempt) {
    if (wait.stop) wait.stop({key}, missing);
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(wait.deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    if (attempt == 1 && on_slow) on_slow();
    try {
      return store.get_within(key, std::min(slice, left));
    } catch (const TimeoutError&) {
    }
    slice = std::min(slice * 2, StartupWait::kLongestSlice);
  }
  if (wait.stop) wait.stop({key}, missing);
  throw TimeoutError("Communicator::create: " + missing() + " " + wait.timeout_context);
}

namespace {

Store::Bytes joined(const std::vector<Store::Bytes>& records) {
  Store::Bytes blob;
  for (const auto& record : records) {
    const auto length = static_cast<uint32_t>(record.size());
    blob.insert(blob.end(), reinterpret_cast<const uint8_t*>(&length), reinterpret_cast<const uint8_t*>(&length) + 4);
    blob.insert(blob.end(), record.begin(), record.end());
  }
  return blob;
}

std::vector<Store::Bytes> split(const Store::Bytes& blob, int size, const std::string& name) {
  std::vector<Store::Bytes> all(static_cast<size_t>(size));
  size_t at = 0;
  for (int r = 0; r < size; ++r) {
    uint32_t length = 0;
    if (blob.size() - at < 4) throw InternalError("Communicator::create: the gathered " + name + " records are cut");
    std::memcpy(&length, blob.data() + at, 4);
    at += 4;
    if (blob.size() - at < length)
      throw InternalError("Communicator::create: the gathered " + name + " records are cut");
    all[static_cast<size_t>(r)].assign(blob.begin() + static_cast<std::ptrdiff_t>(at),
                                       blob.begin() + static_cast<std::ptrdiff_t>(at + length));
    at += length;
  }
  return all;
}

}  // namespace

std::vector<Store::Bytes> allgather(Store& store, const std::string& name, int rank, int size, const Store::Bytes& mine,
                                    const StartupWait& wait) {
  // Who has not published: from `first` on (the ranks before it are known to have), one check each. Only a
  // failing start-up asks.
  auto missing_from = [&](int first) {
    std::string list;
    for (int r = std::max(first, 1); r < size; ++r) {
      if (!store.check({name + "/" + std::to_string(r)})) base::append_listed(list, std::to_string(r));
    }
    return list.empty() ? "rank 0 had every rank's " + name + " record but did not publish them (stuck or dead)"
                        : "rank(s) " + list + " of " + std::to_string(size) + " never arrived";
  };
  if (rank == 0) {
    std::vector<Store::Bytes> all(static_cast<size_t>(size));
    all[0] = mine;
    for (int r = 1; r < size; ++r) {
      // Late ranks are common under load; the others, waiting on rank 0, read where it stands from "waiting".
      all[static_cast<size_t>(r)] = get_waiting(
          store, name + "/" + std::to_string(r), wait, [&] { return missing_from(r); },
          [&] { store.set(name + "/waiting", std::to_string(r)); });
    }
    store.set(name + "/all", joined(all));
    return all;
  }
  store.set(name + "/" + std::to_string(rank), mine);
  const Store::Bytes blob = get_waiting(store, name + "/all", wait, [&] {
    int first = 1;
    try {
      if (store.check({name + "/waiting"})) first = std::stoi(store.get_string(name + "/waiting"));
    } catch (const std::exception&) {
    }
    return missing_from(first);
  });
  return split(blob, size, name);
}

}  // namespace hiercoll::store
