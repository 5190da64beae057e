#pragma once
#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "hiercoll/communicator.hpp"
#include "hiercoll/export.hpp"
#include "hiercoll/types.hpp"

namespace hiercoll {

/// One gradient the bucketer averages: `count` elements of `type` at `data` (host memory), owned by the caller.
struct GradientSpec {
  void* data = nullptr;
  size_t count = 0;
  DataType type = DataType::kFloat32;
};

struct BucketerOptions {
  size_t bucket_cap_bytes = 25u << 20;        ///< as DDP's bucket_cap_mb
  size_t first_bucket_bytes = 1u << 20;       ///< smaller first bucket, so communication starts early
  bool average = true;                        ///< divide by the world size (else sum)
  bool rebuild_after_first_iteration = true;  ///< re-bucket by the order gradients actually became ready
};

/// Gradient bucketing with overlap, in the manner of PyTorch DDP's Reducer, without a framework:
/// gradients are assigned to buckets in reverse registration order (the last layers' gradients are ready
/// first in backward), one data type per bucket, up to the cap. mark_ready(i) copies gradient i into its
/// bucket's fusion buffer; when every gradient of a bucket is in, the bucket's allreduce starts at once
/// (buckets start in bucket order on every rank, as collectives must), overlapping the rest of backward.
/// finish() waits for all buckets and copies the averaged results back into the gradients.
/// After the first iteration, buckets are rebuilt in the order rank 0 saw gradients become ready.
///
/// Every rank must register the same gradients (count and type) in the same order and call mark_ready
/// for each of them once per iteration, then finish().
class HIERCOLL_API GradientBucketer {
 public:
  GradientBucketer(Communicator& comm, std::vector<GradientSpec> gradients, BucketerOptions options = {});
  ~GradientBucketer();
  GradientBucketer(const GradientBucketer&) = delete;
  GradientBucketer& operator=(const GradientBucketer&) = delete;

  /// Gradient `index` holds its final value for this iteration.
  void mark_ready(size_t index);
  /// Waits for every bucket and writes the reduced values back. Throws what an allreduce threw.
  void finish();

  /// Gradient indices of every bucket, in launch order.
  const std::vector<std::vector<size_t>>& buckets() const;

  /// What happened when in the last iteration (for tests and profiling); cleared by the next mark_ready.
  struct Event {
    enum Kind { kReady, kLaunch, kComplete } kind;
    size_t index;  ///< gradient index for kReady, bucket index otherwise
    std::chrono::steady_clock::time_point time;
  };
  const std::vector<Event>& events() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hiercoll
