// Gloo (Debian libgloo-dev) over its TCP transport, rendezvous through hiercoll's store (HIERCOLL_STORE).
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <cstdlib>
#include <cstring>

#include "backend.hpp"
#include "hiercoll/errors.hpp"
#include "hiercoll/store.hpp"

namespace hiercoll::bench {
namespace {

// Gloo's store interface over a hiercoll store.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  explicit StoreAdapter(std::shared_ptr<hiercoll::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set("gloo/" + key, hiercoll::Store::Bytes(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    auto value = store_->get("gloo/" + key);
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, store_->timeout()); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const auto& key : keys) full.push_back("gloo/" + key);
    store_->wait(full, timeout);
  }

 private:
  std::shared_ptr<hiercoll::Store> store_;
};

template <typename T>
void (*reduce_fn(ReduceOp op))(void*, const void*, const void*, size_t) {
  using Fn = void (*)(void*, const void*, const void*, size_t);
  switch (op) {
    case ReduceOp::kSum: return static_cast<Fn>(&gloo::sum<T>);
    case ReduceOp::kProd: return static_cast<Fn>(&gloo::product<T>);
    case ReduceOp::kMin: return static_cast<Fn>(&gloo::min<T>);
    case ReduceOp::kMax: return static_cast<Fn>(&gloo::max<T>);
    default: throw InvalidUsageError("gloo has no avg");
  }
}

class GlooBackend final : public Backend {
 public:
  GlooBackend() {
    rank_ = rank_from_env();
    size_ = size_from_env();
    const char* url = std::getenv("HIERCOLL_STORE");
    if (!url) throw InvalidUsageError("gloo backend: set HIERCOLL_STORE (hiercoll_launch does)");
    // Kept for the backend's lifetime: with a TCP store, rank 0 serves it and peers may still be reading.
    store_ = std::make_unique<StoreAdapter>(open_store(url, rank_));
    gloo::transport::tcp::attr attr;
    const char* iface = std::getenv("HIERCOLL_FABRIC_IFACE");  // same interface as hiercoll's tcp provider
    if (iface) attr.iface = iface;
    else attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    context_ = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
    context_->connectFullMesh(*store_, device);
  }
  std::string name() const override { return "gloo"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string algorithm(size_t) const override { return "ring"; }

  void allreduce(const void* in, void* out, size_t count, DataType type, ReduceOp op) override {
    gloo::AllreduceOptions options(context_);
    options.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    options.setTag(tag_++);
    switch (type) {
      case DataType::kFloat32: run<float>(options, in, out, count, op); break;
      case DataType::kFloat64: run<double>(options, in, out, count, op); break;
      case DataType::kInt32: run<int32_t>(options, in, out, count, op); break;
      default: throw InvalidUsageError(std::string("gloo backend: no ") + to_string(type));
    }
  }
  void allgather(const void* in, void* out, size_t count, DataType type) override {
    gloo::AllgatherOptions options(context_);
    options.setTag(tag_++);
    auto* bytes = static_cast<uint8_t*>(const_cast<void*>(in));
    options.setInput(bytes, count * dtype_size(type));
    options.setOutput(static_cast<uint8_t*>(out), count * dtype_size(type) * static_cast<size_t>(size_));
    gloo::allgather(options);
  }
  void broadcast(void* buffer, size_t count, DataType type, int root) override {
    gloo::BroadcastOptions options(context_);
    options.setTag(tag_++);
    options.setRoot(root);
    options.setOutput(static_cast<uint8_t*>(buffer), count * dtype_size(type));
    gloo::broadcast(options);
  }

 private:
  template <typename T>
  void run(gloo::AllreduceOptions& options, const void* in, void* out, size_t count, ReduceOp op) {
    // Gloo's allreduce is in place on its output; copy for the out-of-place form, as torch's gloo does.
    if (in != out) std::memcpy(out, in, count * sizeof(T));
    options.setOutput(static_cast<T*>(out), count);
    options.setReduceFunction(reduce_fn<T>(op));
    gloo::allreduce(options);
  }

  int rank_ = 0, size_ = 1;
  uint32_t tag_ = 0;
  std::unique_ptr<StoreAdapter> store_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
};

}  // namespace

std::unique_ptr<Backend> make_gloo_backend() { return std::make_unique<GlooBackend>(); }

}  // namespace hiercoll::bench
