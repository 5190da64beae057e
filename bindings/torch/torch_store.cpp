#include "torch_store.hpp"

#include "hiercoll/errors.hpp"

namespace hiercoll_torch {

namespace {
std::string joined(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& key : keys) out += (out.empty() ? "" : ", ") + key;
  return out;
}
}  // namespace

TorchStore::TorchStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {
  timeout_ = store_->getTimeout();
}

void TorchStore::set(const std::string& key, const Bytes& value) { store_->set(key, value); }

// torch's get waits with the store's own timeout; ours must give up after timeout() like every wait.
TorchStore::Bytes TorchStore::get(const std::string& key) {
  wait({key}, timeout());
  return store_->get(key);
}

int64_t TorchStore::add(const std::string& key, int64_t delta) { return store_->add(key, delta); }

bool TorchStore::check(const std::vector<std::string>& keys) { return store_->check(keys); }

void TorchStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  try {
    store_->wait(keys, timeout);
  } catch (const std::exception& e) {
    // torch reports a timeout as a generic error; callers of hiercoll's store expect TimeoutError.
    std::vector<std::string> missing;
    for (const auto& key : keys) {
      if (!store_->check({key})) missing.push_back(key);
    }
    if (missing.empty()) return;
    throw hiercoll::TimeoutError("torch store: keys " + joined(missing) + " did not appear within " +
                                 std::to_string(timeout.count()) + " ms (" + e.what() + ")");
  }
}

}  // namespace hiercoll_torch
