// The one path of every collective (collective.hpp).
#include "engine/collective.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <string>

#include "algo/algorithms.hpp"
#include "algo/hierarchy.hpp"
#include "algo/network_stage.hpp"
#include "base/clock.hpp"
#include "engine/communicator_impl.hpp"
#include "engine/schedules.hpp"
#include "engine/validate.hpp"
#include "gpu/device_path.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll::engine {
namespace {

// A collective's buffers: what it reads (in_bytes of `in`) and writes (out_bytes of `out`); a side this rank
// does not use has 0 bytes (a non-root's broadcast input, a non-root's reduce output).
struct Buffers {
  const void* in;
  size_t in_bytes;
  void* out;
  size_t out_bytes;
};

// The device the buffers live on, or -1 for host memory. Mixed kinds or devices are refused.
int device_of(const char* op, const Buffers& b) {
  // In place, one pointer query (a small share of even NCCL's whole in-place call: docs/gpu.md).
  const gpu::Location in = b.in_bytes ? gpu::locate(b.in) : gpu::Location{};
  const gpu::Location out = !b.out_bytes ? gpu::Location{} : (b.in_bytes && b.out == b.in) ? in : gpu::locate(b.out);
  if (b.in_bytes && b.out_bytes && (in.kind != out.kind || in.device != out.device)) {
    auto name = [](const gpu::Location& l) {
      return l.kind == device::MemoryKind::kHost ? std::string("host memory")
                                                 : "memory of CUDA device " + std::to_string(l.device);
    };
    throw InvalidUsageError(std::string(op) + ": input is " + name(in) + " but output is " + name(out) +
                            "; pass both in one kind of memory");
  }
  const gpu::Location& where = b.in_bytes ? in : out;
  return where.kind == device::MemoryKind::kDevice ? where.device : -1;
}

// Device buffers through pinned host memory: the device stages the input, hands it to the host half, which
// runs the host algorithm there, and takes the result back. Every collective has this path; the allreduce,
// reduce-scatter and allgather have faster ones (on device memory, through the node's peer memory).
algo::NetworkStage::Job issue_staged(const algo::OpContext& issue, gpu::DevicePath& path, const Buffers& b,
                                     const HostBody& body) {
  device::Queue& queue = path.queue();
  void* host_in = b.in_bytes ? path.pinned(b.in_bytes, 0) : nullptr;
  void* host_out = b.out_bytes ? path.pinned(b.out_bytes, 1) : nullptr;
  algo::DeferredStage stage = path.deferred_stage(issue.wait("staged through host memory"));
  if (b.in_bytes) queue.copy(host_in, b.in, b.in_bytes);
  stage.hand_over([body, host_in, host_out](algo::Channel& ch) { body(ch, host_in, host_out); });
  stage.take_back();
  if (b.out_bytes) queue.copy(b.out, host_out, b.out_bytes);
  return stage.host_half();
}

using DeviceIssue = CommunicatorImpl::DeviceIssue;

// Runs a collective: on host buffers `host_body` on the progress thread; on device buffers `device_issue`, or
// without one `host_body` on staged copies (see gpu/device_path.hpp for what runs where).
// `device` is device_of(buffers).
Work run(CommunicatorImpl& impl, int device, std::string what, const algo::OpDescriptor& descriptor,
         const Buffers& buffers, const CallOptions& options, HostBody host_body, DeviceIssue device_issue = nullptr) {
  if (device < 0) {
    return impl.enqueue_collective(
        std::move(what), descriptor,
        [buffers, body = std::move(host_body)](algo::Channel& ch) {
          // Where the provider needs registered memory, the whole buffers once, not every message's piece: a
          // large operation's hundreds of chunks then hit one cache entry.
          const auto pinned_in = ch.pin(buffers.in, buffers.in_bytes);
          const auto pinned_out = ch.pin(buffers.out, buffers.out_bytes);
          body(ch, buffers.in, buffers.out);
        });
  }
  if (impl.size() == 1) {
    // HIERCOLL_CALLER_THREAD=0 (otherwise collective() ran it on the caller's stream): alone, every collective is
    // its input copied to its output, on the internal stream, not a trip through host memory (docs/gpu.md). In place
    // there is nothing to move; the operation is only its end (signalled on the device after the caller's stream, so
    // that is_completed() still means the caller's earlier work is done).
    device_issue = [buffers](const algo::OpContext&, gpu::DevicePath& path) -> algo::NetworkStage::Job {
      if (buffers.out != buffers.in) {
        path.queue().copy(buffers.out, buffers.in, std::min(buffers.in_bytes, buffers.out_bytes));
      }
      return nullptr;
    };
  } else if (!device_issue) {
    device_issue = [buffers, host = std::move(host_body)](const algo::OpContext& issue, gpu::DevicePath& path) {
      return issue_staged(issue, path, buffers, host);
    };
  }
  return impl.enqueue_device_collective(std::move(what), descriptor, device, options.stream, std::move(device_issue));
}

// The buffers a collective reads and writes, checked against its kind's row (algo/kind.hpp): sizes from the count
// and the row's extents, non-null and aligned where used, in place (where the row puts the input) or disjoint; the
// op where it reduces, the root where it has one.
Buffers validate(const Collective& c, int rank, int size) {
  if (!algo::is_kind(c.kind)) {
    throw InvalidUsageError("unknown collective kind " + std::to_string(static_cast<uint32_t>(c.kind)));
  }
  const algo::KindRow& row = algo::row_of(c.kind);
  const char* name = row.name;
  const size_t r = static_cast<size_t>(rank);
  auto extent = [&](algo::Extent e) {
    return e == algo::Extent::kNone ? 0 : checked_bytes(name, c.count, c.type, e == algo::Extent::kRanks ? size : 1);
  };
  size_t in_bytes = extent(row.in), out_bytes = extent(row.out);
  if (row.reduces) check_op(name, c.type, c.op);
  if (row.rooted) check_rank(name, "root", c.root, size);
  if (row.in_at_root_only && rank != c.root) in_bytes = 0;
  if (row.out_at_root_only && rank != c.root) out_bytes = 0;
  const void* in_place_at = c.out;
  if (row.in_place == algo::InPlace::kOutputInside) in_place_at = static_cast<const uint8_t*>(c.out) - r * out_bytes;
  if (row.in_place == algo::InPlace::kInputInside) in_place_at = static_cast<const uint8_t*>(c.out) + r * in_bytes;
  check_buffer(name, "input", c.in, in_bytes, c.type);
  check_buffer(name, "output", c.out, out_bytes, c.type);
  check_overlap(name, c.in, in_bytes, c.out, out_bytes, in_place_at);
  return Buffers{c.in, in_bytes, c.out, out_bytes};
}

// Up to this size a collective of host buffers in node memory only may run on its caller's thread (run_here), which
// then does not return before it ends. Around this size the hand-off it saves is lost in the noise
// (docs/design.md); beyond it the caller keeps its overlap.
constexpr size_t kCallerRunBytes = size_t{1} << 20;

record::CollectiveName name_of(const Collective& c, algo::Algorithm algorithm, bool on_device) {
  return record::CollectiveName{c.kind, c.count, c.type, c.op, c.root, algorithm, on_device};
}

std::string describe(const Collective& c, algo::Algorithm algorithm, bool on_device) {
  std::string out;
  out.reserve(64);
  record::describe_into(out, name_of(c, algorithm, on_device));
  return out;
}

}  // namespace

std::optional<Work> CommunicatorImpl::run_here(const Collective& c, algo::Algorithm algorithm, const Schedule& schedule,
                                              const Call& call) {
  // Handing the operation to the progress thread and waiting for it costs two thread wake-ups, and the closures,
  // names and completion state that carry it across can cost more than a small allreduce itself
  // (docs/experiments.md, "The caller's thread"). So, as MPI's blocking calls do, the caller runs it, when it is next
  // in line.
  if (settings_.check_collectives || !scheduler_.take_caller_turn()) return std::nullopt;
  // The record and the deadline from one coarse clock read (milliseconds are enough for both); the record keeps
  // the collective as data and names it only if it is read: naming every call and precise clock reads showed in
  // a small allreduce's profile (`git log -S coarse_now -- lib/engine/collective.cpp` has the figures).
  const auto now = base::coarse_now();
  const uint64_t seq = flight_.started_here(name_of(c, algorithm, false), now);
  ++sequence_;  // the channel numbering stays in step with ranks that run this operation on the progress thread
  std::optional<base::Failure> failure;
  try {
    // Named only if it fails (below).
    const algo::OpContext context{{now + timeout(), &halted_.aborted(), std::string()}, size_};
    schedule.on_caller(*this, context, call, c.in, c.out);
  } catch (const Error& e) {
    failure = base::Failure::of(e);
  } catch (const std::exception& e) {
    failure = base::Failure{ErrorCode::kInternal, e.what()};
  }
  flight_.ended_here(seq, !failure, base::coarse_now());
  Work work;  // finished: a Work without state
  if (failure) {
    const std::string what = describe(c, algorithm, false);
    const char* phase = schedule.on_caller_phase ? schedule.on_caller_phase(*this, call) : nullptr;
    failure->message =
        what + " (rank " + std::to_string(rank_) + ")" + (phase ? std::string(" ") + phase : "") + failure->message;
    fail(*failure, what, true);
    auto state = std::make_shared<WorkState>();
    state->finish(failure);
    work = Work(state);
  }
  scheduler_.end_caller_turn();
  return work;
}

std::optional<Work> CommunicatorImpl::run_alone_here(const record::CollectiveName& name, void* out, const void* in,
                                                     size_t bytes) {
  // As run_here: the caller's turn (refused while anything is queued, or once the communicator broke or was
  // aborted: the progress thread then fails the operation as it should), the record from one coarse clock read.
  if (settings_.check_collectives || !scheduler_.take_caller_turn()) return std::nullopt;
  const uint64_t seq = flight_.started_here(name, base::coarse_now());
  ++sequence_;  // as every operation
  if (bytes != 0 && out != in) std::memcpy(out, in, bytes);
  flight_.ended_here(seq, true, base::coarse_now());
  scheduler_.end_caller_turn();
  return Work();  // finished: a Work without state
}

Work CommunicatorImpl::collective(const Collective& c) {
  const Buffers buffers = validate(c, rank_, size_);
  const int device = device_of(algo::to_string(c.kind), buffers);
  const size_t bytes = std::max(buffers.in_bytes, buffers.out_bytes);
  const algo::Algorithm algorithm = selector_->choose(c.kind, bytes, device >= 0);
  if (size_ == 1 && settings_.caller_thread) {
    // Alone, every collective is its input copied to its output (kAvg divides by one): in place nothing at all. On
    // a device, on the caller's stream as NCCL does it (the internal stream and the progress thread cost far more
    // host time: docs/gpu.md); on the host, by the caller, without the closures, names and channel of an
    // operation, which cost twice what a 2-rank 8 B allreduce costs (a size-1 group is common: a DeviceMesh
    // dimension of 1).
    const size_t copied = std::min(buffers.in_bytes, buffers.out_bytes);
    if (device >= 0) {
      return enqueue_device_alone(name_of(c, algorithm, true), device, c.options.stream, buffers.out, buffers.in,
                                  copied);
    }
    if (std::optional<Work> done = run_alone_here(name_of(c, algorithm, false), buffers.out, buffers.in, copied)) {
      return *std::move(done);
    }
  }
  const Schedule& schedule = schedule_of(algorithm, c.kind);
  const Call call{c.count, c.type, c.op, c.root, buffers.in_bytes, buffers.out_bytes, size_};
  // Host buffers in node memory only (the one-node allreduce, the node reduce-scatter, allgather, broadcast and
  // barrier) may run on the caller's thread.
  const bool node_only =
      schedule.on_caller != nullptr && (schedule.on_caller_fits == nullptr || schedule.on_caller_fits(*this));
  if (device < 0 && bytes <= kCallerRunBytes && node_only) {
    if (std::optional<Work> done = run_here(c, algorithm, schedule, call)) return *std::move(done);
  }
  const algo::OpDescriptor descriptor{static_cast<uint32_t>(c.kind), static_cast<uint32_t>(c.type),
                                      static_cast<uint32_t>(algo::row_of(c.kind).reduces ? c.op : ReduceOp::kSum),
                                      c.root, c.count};
  DeviceIssue device_issue = device >= 0 && schedule.device ? schedule.device(*this, call, c.in, c.out) : nullptr;
  return run(*this, device, describe(c, algorithm, device >= 0), descriptor, buffers, c.options,
             schedule.host(*this, call), std::move(device_issue));
}

}  // namespace hiercoll::engine
