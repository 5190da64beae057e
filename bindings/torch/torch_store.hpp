#pragma once
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "hiercoll/store.hpp"

namespace hiercoll_torch {

/// hiercoll's rendezvous over the store torch.distributed hands a backend (TCPStore, FileStore, env://),
/// so the communicator meets its peers where torch already did.
class TorchStore : public hiercoll::Store {
 public:
  explicit TorchStore(c10::intrusive_ptr<c10d::Store> store);
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using hiercoll::Store::set;
  using hiercoll::Store::wait;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace hiercoll_torch
