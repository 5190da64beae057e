// GradientBucketer: DDP-style fusion buffers over Communicator::allreduce.
#include "hiercoll/bucketer.hpp"

#include <cstring>
#include <map>

#include "hiercoll/errors.hpp"

namespace hiercoll {

struct GradientBucketer::Impl {
  struct Bucket {
    DataType type;
    std::vector<size_t> gradients;  // indices
    std::vector<size_t> offsets;    // element offset of each gradient in the fusion buffer
    size_t count = 0;
    std::vector<uint64_t> storage;  // fusion buffer (uint64_t: aligned for every type)
    size_t pending = 0;
    Work work;
    void* data() { return storage.data(); }
  };

  Communicator& comm;
  std::vector<GradientSpec> gradients;
  BucketerOptions options;
  std::vector<Bucket> buckets;
  std::vector<std::vector<size_t>> layout;  // buckets() view
  std::vector<size_t> bucket_of, slot_of;   // per gradient
  std::vector<bool> ready;
  std::vector<size_t> ready_order;  // this iteration
  size_t next_launch = 0;
  bool rebuilt = false;
  std::vector<Event> events;
  bool clear_events = false;

  Impl(Communicator& c, std::vector<GradientSpec> g, BucketerOptions o) : comm(c), gradients(std::move(g)), options(o) {
    for (size_t i = 0; i < gradients.size(); ++i) {
      const auto& spec = gradients[i];
      if (spec.count > 0 && spec.data == nullptr) {
        throw InvalidUsageError("GradientBucketer: gradient " + std::to_string(i) + " has no data");
      }
      if (static_cast<int>(spec.type) >= kNumDataTypes) {
        throw InvalidUsageError("GradientBucketer: gradient " + std::to_string(i) + " has an unknown type");
      }
      if (options.average && !is_floating(spec.type)) {
        throw InvalidUsageError("GradientBucketer: gradient " + std::to_string(i) + " is " + to_string(spec.type) +
                                ", which cannot be averaged");
      }
    }
    std::vector<size_t> order;  // reverse registration order
    for (size_t i = gradients.size(); i-- > 0;) order.push_back(i);
    assign(order);
    reset_iteration();
  }

  // Buckets in the given gradient order: consecutive gradients of one type share a bucket up to the cap
  // (the first bucket's cap is smaller). A gradient of another type goes to that type's open bucket.
  void assign(const std::vector<size_t>& order) {
    buckets.clear();
    std::map<DataType, size_t> open;  // type -> index of its open bucket
    for (size_t g : order) {
      const auto& spec = gradients[g];
      const size_t elem = dtype_size(spec.type);
      auto it = open.find(spec.type);
      bool fits = false;
      if (it != open.end()) {
        const Bucket& b = buckets[it->second];
        size_t cap = it->second == 0 ? options.first_bucket_bytes : options.bucket_cap_bytes;
        fits = (b.count + spec.count) * elem <= cap;
      }
      if (!fits) {  // a new bucket; a gradient larger than the cap gets one of its own
        buckets.push_back(Bucket{spec.type, {}, {}, 0, {}, 0, {}});
        open[spec.type] = buckets.size() - 1;
      }
      Bucket& b = buckets[open[spec.type]];
      b.gradients.push_back(g);
      b.offsets.push_back(b.count);
      b.count += spec.count;
    }
    bucket_of.assign(gradients.size(), 0);
    slot_of.assign(gradients.size(), 0);
    layout.clear();
    for (size_t b = 0; b < buckets.size(); ++b) {
      buckets[b].storage.assign((buckets[b].count * dtype_size(buckets[b].type) + 7) / 8 + 1, 0);
      for (size_t s = 0; s < buckets[b].gradients.size(); ++s) {
        bucket_of[buckets[b].gradients[s]] = b;
        slot_of[buckets[b].gradients[s]] = s;
      }
      layout.push_back(buckets[b].gradients);
    }
  }

  void reset_iteration() {
    ready.assign(gradients.size(), false);
    ready_order.clear();
    next_launch = 0;
    for (auto& b : buckets) {
      b.pending = b.gradients.size();
      b.work = Work();
    }
  }

  void mark_ready(size_t index) {
    if (index >= gradients.size()) {
      throw InvalidUsageError("GradientBucketer::mark_ready: no gradient " + std::to_string(index));
    }
    if (ready[index]) {
      throw InvalidUsageError("GradientBucketer::mark_ready: gradient " + std::to_string(index) +
                              " was already marked ready in this iteration");
    }
    if (clear_events) {  // the previous iteration's events stayed readable until now
      events.clear();
      clear_events = false;
    }
    ready[index] = true;
    ready_order.push_back(index);
    events.push_back({Event::kReady, index, std::chrono::steady_clock::now()});
    Bucket& b = buckets[bucket_of[index]];
    const auto& spec = gradients[index];
    size_t elem = dtype_size(spec.type);
    if (spec.count) {
      std::memcpy(static_cast<uint8_t*>(b.data()) + b.offsets[slot_of[index]] * elem, spec.data, spec.count * elem);
    }
    --b.pending;
    // Launch every complete bucket in bucket order: all ranks then issue the same allreduces in the same order,
    // even if their gradients became ready in different orders.
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
      Bucket& next = buckets[next_launch];
      next.work = comm.allreduce(next.data(), next.data(), next.count, next.type,
                                 options.average ? ReduceOp::kAvg : ReduceOp::kSum);
      events.push_back({Event::kLaunch, next_launch, std::chrono::steady_clock::now()});
      ++next_launch;
    }
  }

  void finish() {
    for (size_t i = 0; i < gradients.size(); ++i) {
      if (!ready[i]) {
        throw InvalidUsageError("GradientBucketer::finish: gradient " + std::to_string(i) +
                                " was not marked ready in this iteration");
      }
    }
    for (size_t b = 0; b < buckets.size(); ++b) {
      buckets[b].work.wait();
      events.push_back({Event::kComplete, b, std::chrono::steady_clock::now()});
      const Bucket& bucket = buckets[b];
      size_t elem = dtype_size(bucket.type);
      for (size_t s = 0; s < bucket.gradients.size(); ++s) {
        const auto& spec = gradients[bucket.gradients[s]];
        if (spec.count) {
          std::memcpy(spec.data, reinterpret_cast<const uint8_t*>(bucket.storage.data()) + bucket.offsets[s] * elem,
                      spec.count * elem);
        }
      }
    }
    if (options.rebuild_after_first_iteration && !rebuilt) {
      // Everyone adopts rank 0's observed ready order, so the new buckets are the same on every rank.
      std::vector<int64_t> order(ready_order.begin(), ready_order.end());
      comm.broadcast(order.data(), order.data(), order.size(), DataType::kInt64, 0).wait();
      assign(std::vector<size_t>(order.begin(), order.end()));
      rebuilt = true;
    }
    reset_iteration();
    clear_events = true;
  }
};

GradientBucketer::GradientBucketer(Communicator& comm, std::vector<GradientSpec> gradients, BucketerOptions options)
    : impl_(std::make_unique<Impl>(comm, std::move(gradients), options)) {}
GradientBucketer::~GradientBucketer() = default;
void GradientBucketer::mark_ready(size_t index) { impl_->mark_ready(index); }
void GradientBucketer::finish() { impl_->finish(); }
const std::vector<std::vector<size_t>>& GradientBucketer::buckets() const { return impl_->layout; }
const std::vector<GradientBucketer::Event>& GradientBucketer::events() const { return impl_->events; }

}  // namespace hiercoll
