#include "grad_sync.hpp"

#include <torch/csrc/distributed/c10d/Store.hpp>
#ifdef HIERCOLL_ALBERT_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef HIERCOLL_ALBERT_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#ifdef HIERCOLL_ALBERT_MPI
#include <mpi.h>
#endif
#ifdef HIERCOLL_ALBERT_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <cstdlib>
#include <functional>
#include <stdexcept>

#include "hiercoll/bucketer.hpp"
#include "compat.hpp"
#include "hiercoll/communicator.hpp"

namespace albert {

namespace {

// ---- hiercoll: the library's own bucketer -------------------------------------------------------

/// GradSync::sum for both hiercoll paths: a host allreduce, whatever memory the gradients are in.
std::vector<double> sum_over_ranks(hiercoll::Communicator& comm, const std::vector<double>& values) {
  std::vector<double> out(values.size());
  comm.allreduce(values.data(), out.data(), values.size(), hiercoll::DataType::kFloat64, hiercoll::ReduceOp::kSum)
      .wait();
  return out;
}

class HiercollSync : public GradSync {
 public:
  HiercollSync(const hiercoll::Rendezvous& rv, std::vector<torch::Tensor> grads)
      : comm_(hiercoll::Communicator::create(std::make_shared<hiercoll::PrefixStore>("hiercoll", rv.store), rv.rank,
                                             rv.size)),
        grads_(std::move(grads)) {
    std::vector<hiercoll::GradientSpec> specs;
    for (auto& g : grads_) {
      TORCH_CHECK(g.scalar_type() == torch::kFloat && g.is_contiguous(), "hiercoll sync expects contiguous fp32 grads");
      // Only with a hiercoll built without CUDA: device gradients go through a host mirror.
      host_.push_back(g.is_cpu() ? g : torch::empty_like(g, torch::TensorOptions().device(torch::kCPU)));
      specs.push_back({host_.back().data_ptr(), static_cast<size_t>(g.numel()), hiercoll::DataType::kFloat32});
    }
    bucketer_ = std::make_unique<hiercoll::GradientBucketer>(comm_, specs);
  }
  std::string name() const override { return "hiercoll"; }

  void broadcast(const std::vector<torch::Tensor>& tensors) override {
    for (const auto& t : tensors) {
      torch::Tensor h = t.is_cpu() ? t : t.cpu();
      comm_.broadcast(h.data_ptr(), h.data_ptr(), h.numel(), hiercoll::DataType::kFloat32, 0).wait();
      if (!t.is_cpu()) t.copy_(h);
    }
  }
  void ready(size_t index) override {
    if (!grads_[index].is_cpu()) host_[index].copy_(grads_[index]);
    bucketer_->mark_ready(index);
  }
  void finish() override {
    bucketer_->finish();
    for (size_t i = 0; i < grads_.size(); ++i) {
      if (!grads_[i].is_cpu()) grads_[i].copy_(host_[i]);
    }
  }
  std::vector<double> sum(const std::vector<double>& values) override { return sum_over_ranks(comm_, values); }

 private:
  hiercoll::Communicator comm_;
  std::vector<torch::Tensor> grads_, host_;
  std::unique_ptr<hiercoll::GradientBucketer> bucketer_;
};

// ---- stock backends: DDP-style buckets over one allreduce primitive -------------------------------

/// Starts an in-place sum of `flat` over ranks; the returned function waits for it.
using StartAllreduce = std::function<std::function<void()>(torch::Tensor& flat)>;

class BucketedSync : public GradSync {
 public:
  BucketedSync(std::string name, int world_size, std::vector<torch::Tensor> grads, StartAllreduce start,
               std::function<void(const torch::Tensor&)> broadcast_one,
               std::function<std::vector<double>(const std::vector<double>&)> sum)
      : name_(std::move(name)), world_size_(world_size), grads_(std::move(grads)), start_(std::move(start)),
        broadcast_one_(std::move(broadcast_one)), sum_(std::move(sum)) {
    // As DDP: reverse registration order, a 1 MB first bucket, then 25 MB.
    size_t bytes = 0, cap = 1u << 20;
    for (size_t i = grads_.size(); i-- > 0;) {
      if (buckets_.empty() || bytes >= cap) {
        if (!buckets_.empty()) cap = 25u << 20;
        buckets_.push_back({});
        bytes = 0;
      }
      buckets_.back().members.push_back(i);
      bytes += grads_[i].numel() * grads_[i].element_size();
      bucket_of_.resize(grads_.size());
      bucket_of_[i] = buckets_.size() - 1;
    }
    is_ready_.assign(grads_.size(), false);
  }
  std::string name() const override { return name_; }

  void broadcast(const std::vector<torch::Tensor>& tensors) override {
    for (const auto& t : tensors) broadcast_one_(t);
  }
  void ready(size_t index) override {
    TORCH_CHECK(!is_ready_[index], "gradient ", index, " marked ready twice in one iteration");
    is_ready_[index] = true;
    ++buckets_[bucket_of_[index]].ready;
    // Buckets start in order on every rank, as collectives must.
    while (next_ < buckets_.size() && buckets_[next_].ready == buckets_[next_].members.size()) launch(buckets_[next_++]);
  }
  void finish() override {
    TORCH_CHECK(next_ == buckets_.size(), name_, " sync: only ", next_, " of ", buckets_.size(),
                " buckets were complete at the end of backward");
    for (auto& bucket : buckets_) {
      bucket.wait();
      bucket.flat.div_(world_size_);
      int64_t offset = 0;
      for (size_t i : bucket.members) {
        grads_[i].view(-1).copy_(bucket.flat.narrow(0, offset, grads_[i].numel()));
        offset += grads_[i].numel();
      }
      bucket.ready = 0;
    }
    next_ = 0;
    is_ready_.assign(grads_.size(), false);
  }
  std::vector<double> sum(const std::vector<double>& values) override { return sum_(values); }

 private:
  struct Bucket {
    std::vector<size_t> members;
    size_t ready = 0;
    torch::Tensor flat;
    std::function<void()> wait;
  };
  void launch(Bucket& bucket) {
    std::vector<torch::Tensor> views;
    for (size_t i : bucket.members) views.push_back(grads_[i].view(-1));
    bucket.flat = torch::cat(views);
    bucket.wait = start_(bucket.flat);
  }

  std::string name_;
  int world_size_;
  std::vector<torch::Tensor> grads_;
  StartAllreduce start_;
  std::function<void(const torch::Tensor&)> broadcast_one_;
  std::function<std::vector<double>(const std::vector<double>&)> sum_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<bool> is_ready_;
  size_t next_ = 0;
};

/// c10d's Store over hiercoll's, so gloo and NCCL meet through the same rendezvous as hiercoll.
class C10dStore : public c10d::Store {
 public:
  explicit C10dStore(std::shared_ptr<hiercoll::Store> store) : store_(std::move(store)) {}
  // Pure virtual in recent torch 2.x, absent in 1.13 (hence no `override`). hiercoll's stores are thread-safe,
  // so a clone is another handle on the same one.
  c10::intrusive_ptr<c10d::Store> clone() { return c10::make_intrusive<C10dStore>(store_); }
  void set(const std::string& key, const std::vector<uint8_t>& value) override { store_->set(key, value); }
  std::vector<uint8_t> get(const std::string& key) override { return store_->get(key); }
  int64_t add(const std::string& key, int64_t value) override { return store_->add(key, value); }
  bool deleteKey(const std::string&) override { TORCH_CHECK(false, "deleteKey is not supported"); }
  bool check(const std::vector<std::string>& keys) override { return store_->check(keys); }
  int64_t getNumKeys() override { TORCH_CHECK(false, "getNumKeys is not supported"); }
  void wait(const std::vector<std::string>& keys) override { store_->wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    store_->wait(keys, timeout);
  }

 private:
  std::shared_ptr<hiercoll::Store> store_;
};

std::unique_ptr<GradSync> c10d_sync(const std::string& name, c10::intrusive_ptr<hiercoll_torch::compat::BackendBase> pg, int size,
                                    std::vector<torch::Tensor> grads) {
  auto start = [pg](torch::Tensor& flat) -> std::function<void()> {
    std::vector<at::Tensor> tensors{flat};
    auto work = pg->allreduce(tensors);
    return [work] { work->wait(); };
  };
  auto broadcast_one = [pg](const torch::Tensor& t) {
    std::vector<at::Tensor> tensors{t};
    pg->broadcast(tensors)->wait();
  };
  // On the gradients' device: NCCL takes CUDA tensors only.
  auto sum = [pg, device = grads.at(0).device()](const std::vector<double>& values) {
    std::vector<at::Tensor> tensors{torch::tensor(values, torch::kDouble).to(device)};
    pg->allreduce(tensors)->wait();
    at::Tensor result = tensors[0].cpu();
    auto* p = result.data_ptr<double>();
    return std::vector<double>(p, p + values.size());
  };
  return std::make_unique<BucketedSync>(name, size, std::move(grads), start, broadcast_one, sum);
}

#ifdef HIERCOLL_ALBERT_CUDA
// CUDA gradients: the same DDP-style buckets the stock backends get, over hiercoll's device allreduce ordered on
// the current stream (as ProcessGroupNCCL orders its own): no host copy and no host wait inside backward.
std::unique_ptr<GradSync> hiercoll_device_sync(const hiercoll::Rendezvous& rv, std::vector<torch::Tensor> grads) {
  auto comm = std::make_shared<hiercoll::Communicator>(hiercoll::Communicator::create(
      std::make_shared<hiercoll::PrefixStore>("hiercoll", rv.store), rv.rank, rv.size));
  auto on_current_stream = [] {
    hiercoll::CallOptions options;
    options.stream = c10::cuda::getCurrentCUDAStream().stream();
    return options;
  };
  auto start = [comm, on_current_stream](torch::Tensor& flat) -> std::function<void()> {
    TORCH_CHECK(flat.scalar_type() == torch::kFloat, "hiercoll sync expects fp32 grads");
    auto work = comm->allreduce(flat.data_ptr(), flat.data_ptr(), flat.numel(), hiercoll::DataType::kFloat32,
                                hiercoll::ReduceOp::kSum, on_current_stream());
    return [work] { work.wait(); };
  };
  auto broadcast_one = [comm, on_current_stream](const torch::Tensor& t) {
    TORCH_CHECK(t.scalar_type() == torch::kFloat && t.is_contiguous(), "hiercoll sync broadcasts contiguous fp32");
    comm->broadcast(t.data_ptr(), t.data_ptr(), t.numel(), hiercoll::DataType::kFloat32, 0, on_current_stream())
        .wait();
  };
  auto sum = [comm](const std::vector<double>& values) { return sum_over_ranks(*comm, values); };
  return std::make_unique<BucketedSync>("hiercoll", rv.size, std::move(grads), start, broadcast_one, sum);
}
#endif

#ifdef HIERCOLL_ALBERT_MPI
std::unique_ptr<GradSync> mpi_sync(std::vector<torch::Tensor> grads) {
  int initialised = 0, size = 1;
  MPI_Initialized(&initialised);
  if (!initialised) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    std::atexit([] {
      int finalised = 0;
      MPI_Finalized(&finalised);
      if (!finalised) MPI_Finalize();
    });
  }
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  auto start = [](torch::Tensor& flat) -> std::function<void()> {
    auto request = std::make_shared<MPI_Request>();
    MPI_Iallreduce(MPI_IN_PLACE, flat.data_ptr(), static_cast<int>(flat.numel()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                   request.get());
    return [request] { MPI_Wait(request.get(), MPI_STATUS_IGNORE); };
  };
  auto broadcast_one = [](const torch::Tensor& t) {
    MPI_Bcast(t.data_ptr(), static_cast<int>(t.numel()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  };
  auto sum = [](const std::vector<double>& values) {
    std::vector<double> out(values.size());
    MPI_Allreduce(values.data(), out.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return out;
  };
  return std::make_unique<BucketedSync>("mpi", size, std::move(grads), start, broadcast_one, sum);
}
#endif

}  // namespace

std::unique_ptr<GradSync> make_grad_sync(const std::string& backend, const hiercoll::Rendezvous& rv,
                                         std::vector<torch::Tensor> grads) {
  if (backend == "hiercoll") {
#ifdef HIERCOLL_ALBERT_CUDA
    if (!grads.empty() && grads[0].is_cuda() && hiercoll::Communicator::device_buffers_supported()) {
      return hiercoll_device_sync(rv, std::move(grads));
    }
#endif
    return std::make_unique<HiercollSync>(rv, std::move(grads));
  }
#ifdef HIERCOLL_ALBERT_GLOO
  if (backend == "gloo") {
    auto store = c10::make_intrusive<C10dStore>(std::make_shared<hiercoll::PrefixStore>("gloo", rv.store));
    auto options = c10d::ProcessGroupGloo::Options::create();
    const char* iface = std::getenv("HIERCOLL_FABRIC_IFACE");  // the same network hiercoll is told to use
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(iface ? iface : "lo"));
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rv.rank, rv.size, options);
    return c10d_sync("gloo", pg, rv.size, std::move(grads));
  }
#endif
#ifdef HIERCOLL_ALBERT_NCCL
  if (backend == "nccl") {
    auto store = c10::make_intrusive<C10dStore>(std::make_shared<hiercoll::PrefixStore>("nccl", rv.store));
    auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rv.rank, rv.size);
    return c10d_sync("nccl", pg, rv.size, std::move(grads));
  }
#endif
#ifdef HIERCOLL_ALBERT_MPI
  if (backend == "mpi") return mpi_sync(std::move(grads));
#endif
  std::string known;
  for (const auto& b : available_backends()) known += (known.empty() ? "" : ", ") + b;
  throw std::invalid_argument("backend '" + backend + "' is not available in this build (" + known + ")");
}

std::vector<std::string> available_backends() {
  std::vector<std::string> out{"hiercoll"};
#ifdef HIERCOLL_ALBERT_GLOO
  out.push_back("gloo");
#endif
#ifdef HIERCOLL_ALBERT_NCCL
  out.push_back("nccl");
#endif
#ifdef HIERCOLL_ALBERT_MPI
  out.push_back("mpi");
#endif
  return out;
}

}  // namespace albert
