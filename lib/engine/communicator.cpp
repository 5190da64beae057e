// The public Communicator: checks every argument on the caller's thread (so bad input is an immediate
// InvalidUsageError and leaves the communicator usable), then hands the work to the progress thread.
#include "hiercoll/communicator.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <sstream>

#include "algo/algorithms.hpp"
#include "algo/hierarchy.hpp"
#include "algo/network_stage.hpp"
#include "base/env.hpp"
#include "base/settings.hpp"
#include "engine/communicator_impl.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll {
namespace {

using engine::CommunicatorImpl;
using engine::DevicePath;
using engine::locate;
using engine::Location;

std::string describe(const char* op, size_t count, DataType type) {
  std::ostringstream out;
  out << op << "(" << count << " x " << to_string(type) << ")";
  return out.str();
}

size_t checked_bytes(const char* op, size_t count, DataType type, size_t multiplier = 1) {
  if (static_cast<int>(type) >= kNumDataTypes) {
    throw InvalidUsageError(std::string(op) + ": unknown data type " + std::to_string(static_cast<int>(type)));
  }
  size_t elem = dtype_size(type);
  if (count != 0 && (count > SIZE_MAX / elem / multiplier)) {
    throw InvalidUsageError(std::string(op) + ": count " + std::to_string(count) + " overflows the address space");
  }
  return count * elem * multiplier;
}

void check_buffer(const char* op, const char* name, const void* buffer, size_t bytes, DataType type) {
  if (bytes == 0) return;
  if (buffer == nullptr) throw InvalidUsageError(std::string(op) + ": " + name + " buffer is null");
  if (reinterpret_cast<uintptr_t>(buffer) % dtype_size(type) != 0) {
    std::ostringstream out;
    out << op << ": " << name << " buffer " << buffer << " is not aligned to the " << dtype_size(type) << "-byte "
        << to_string(type) << " element";
    throw InvalidUsageError(out.str());
  }
}

// In and out may be the same buffer (in place) or disjoint, never partly overlapping.
void check_overlap(const char* op, const void* in, size_t in_bytes, const void* out, size_t out_bytes,
                   const void* in_place_at) {
  if (in_bytes == 0 || out_bytes == 0 || in == in_place_at) return;
  auto a = reinterpret_cast<uintptr_t>(in), b = reinterpret_cast<uintptr_t>(out);
  if (a < b + out_bytes && b < a + in_bytes) {
    throw InvalidUsageError(std::string(op) + ": input and output buffers overlap without being the in-place form");
  }
}

void check_op(const char* op, DataType type, ReduceOp reduce_op) {
  if (static_cast<int>(reduce_op) >= kNumReduceOps) {
    throw InvalidUsageError(std::string(op) + ": unknown reduce op " + std::to_string(static_cast<int>(reduce_op)));
  }
  if (reduce_op == ReduceOp::kAvg && !is_floating(type)) {
    throw InvalidUsageError(std::string(op) + ": avg is defined on floating types only, not " + to_string(type));
  }
}

void check_rank(const char* op, const char* what, int rank, int size) {
  if (rank < 0 || rank >= size) {
    throw InvalidUsageError(std::string(op) + ": " + what + " " + std::to_string(rank) + " is not a rank of this " +
                            std::to_string(size) + "-rank communicator");
  }
}

// Point-to-point runs beside the collectives on the progress thread, with no stream to order it by.
void check_host(const char* op, const void* buffer, size_t bytes) {
  if (bytes != 0 && locate(buffer).kind != device::MemoryKind::kHost) {
    throw InvalidUsageError(std::string(op) +
                            ": device buffers are not supported for point-to-point yet; copy to "
                            "host memory (the torch binding stages them)");
  }
}

// What ranks compare before a collective when the mismatch check is on (HIERCOLL_DEBUG=DETAIL).
algo::OpDescriptor op_descriptor(engine::OpKind kind, size_t count, DataType type, ReduceOp op = ReduceOp::kSum,
                                 int root = -1) {
  return {kind, static_cast<uint32_t>(type), static_cast<uint32_t>(op), root, count};
}

}  // namespace

CommOptions CommOptions::from_env() {
  const base::Settings settings = base::Settings::from_env();
  CommOptions options;
  options.timeout = std::chrono::milliseconds(settings.timeout_ms);
  options.provider = settings.fabric_provider;
  return options;
}

Communicator::Communicator(std::unique_ptr<engine::CommunicatorImpl> impl) : impl_(std::move(impl)) {}
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;
Communicator::~Communicator() = default;

Communicator Communicator::create(std::shared_ptr<Store> store, int rank, int size, CommOptions options) {
  return Communicator(std::make_unique<CommunicatorImpl>(std::move(store), rank, size, std::move(options)));
}

int Communicator::rank() const { return impl_->rank(); }
int Communicator::size() const { return impl_->size(); }

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
  Location in = b.in_bytes ? locate(b.in) : Location{}, out = b.out_bytes ? locate(b.out) : Location{};
  if (b.in_bytes && b.out_bytes && (in.kind != out.kind || in.device != out.device)) {
    auto name = [](const Location& l) {
      return l.kind == device::MemoryKind::kHost ? std::string("host memory")
                                                 : "memory of CUDA device " + std::to_string(l.device);
    };
    throw InvalidUsageError(std::string(op) + ": input is " + name(in) + " but output is " + name(out) +
                            "; pass both in one kind of memory");
  }
  const Location& where = b.in_bytes ? in : out;
  return where.kind == device::MemoryKind::kDevice ? where.device : -1;
}

using HostBody = std::function<void(algo::Channel&, const void* in, void* out)>;

// Device buffers through pinned host memory: the device stages the input, hands it to the host half, which
// runs the host algorithm there, and takes the result back. Every collective has this path; the allreduce,
// reduce-scatter and allgather have faster ones (on device memory, through the node's peer memory).
algo::NetworkStage::Job issue_staged(const algo::Issue& issue, DevicePath& path, const Buffers& b,
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

using DeviceIssue = engine::CommunicatorImpl::DeviceIssue;

// Runs a collective: on host buffers `host_body` on the progress thread; on device buffers `device_issue`, or
// without one `host_body` on staged copies (see device_path.hpp for what runs where).
// `device` is device_of(buffers).
Work run(CommunicatorImpl& impl, int device, std::string what, const algo::OpDescriptor& descriptor,
         const Buffers& buffers, const CallOptions& options, HostBody host_body, DeviceIssue device_issue = nullptr) {
  if (device < 0) {
    return impl.enqueue_collective(
        std::move(what), descriptor,
        [buffers, body = std::move(host_body)](algo::Channel& ch) { body(ch, buffers.in, buffers.out); });
  }
  if (impl.size() == 1) {
    // Alone, every collective is its input copied to its output (kAvg divides by one): a device copy, not a
    // trip through host memory (23.7 us for 8 B and 2.1 ms for 16 MB staged on an H100, where NCCL takes 8 us).
    // In place there is nothing to move; the operation is only its end event.
    device_issue = [buffers](const algo::Issue&, DevicePath& path) -> algo::NetworkStage::Job {
      if (buffers.out != buffers.in) {
        path.queue().copy(buffers.out, buffers.in, std::min(buffers.in_bytes, buffers.out_bytes));
      }
      return nullptr;
    };
  } else if (!device_issue) {
    device_issue = [buffers, host = std::move(host_body)](const algo::Issue& issue, DevicePath& path) {
      return issue_staged(issue, path, buffers, host);
    };
  }
  return impl.enqueue_device_collective(std::move(what), descriptor, device, options.stream, std::move(device_issue));
}

}  // namespace

Work Communicator::allreduce(const void* in, void* out, size_t count, DataType type, ReduceOp op,
                             const CallOptions& options) {
  size_t bytes = checked_bytes("allreduce", count, type);
  check_op("allreduce", type, op);
  check_buffer("allreduce", "input", in, bytes, type);
  check_buffer("allreduce", "output", out, bytes, type);
  check_overlap("allreduce", in, bytes, out, bytes, out);
  const Buffers buffers{in, bytes, out, bytes};
  const int location = device_of("allreduce", buffers);
  const bool on_device = location >= 0;
  auto algo = impl_->choose_allreduce(bytes, on_device);
  // On device buffers the hierarchical allreduce runs its intra-node phases on the GPUs; the flat algorithms
  // run on a staged host copy.
  const bool device_hier = on_device && algo == algo::AllreduceAlgo::kHierarchical;
  std::string what = describe("allreduce", count, type) + " " + to_string(op) + " [" + algo::to_string(algo) +
                     (on_device ? ", device" : "") + "]";
  algo::Hierarchy* hierarchy = &impl_->hierarchy();
  algo::NodeMemory* host_memory = &impl_->host_memory();
  engine::CommunicatorImpl* impl = impl_.get();
  HostBody host = [=](algo::Channel& ch, const void* from, void* to) {
    switch (algo) {
      case algo::AllreduceAlgo::kRing: algo::allreduce_ring(ch, from, to, count, type, op); break;
      case algo::AllreduceAlgo::kRecursiveDoubling:
        algo::allreduce_recursive_doubling(ch, from, to, count, type, op);
        break;
      case algo::AllreduceAlgo::kHierarchical: {
        algo::HelperStage network(*hierarchy->network, ch);
        algo::allreduce_hier(algo::Issue::of(ch), *hierarchy, *host_memory, network, from, to, count, type, op);
        break;
      }
    }
  };
  DeviceIssue device;
  if (device_hier) {
    device = [=](const algo::Issue& issue, DevicePath& path) {
      algo::NodeMemory& memory = impl->device_node_memory(issue, path);
      algo::DeferredStage network = path.deferred_stage(issue.wait("network phase"));
      algo::allreduce_hier(issue, *hierarchy, memory, network, in, out, count, type, op);
      return network.host_half();
    };
  }
  return run(*impl_, location, what, op_descriptor(engine::kOpAllreduce, count, type, op), buffers, options, host,
             device);
}

Work Communicator::reduce_scatter(const void* in, void* out, size_t recv_count, DataType type, ReduceOp op,
                                  const CallOptions& options) {
  size_t out_bytes = checked_bytes("reduce_scatter", recv_count, type);
  size_t in_bytes = checked_bytes("reduce_scatter", recv_count, type, static_cast<size_t>(size()));
  check_op("reduce_scatter", type, op);
  check_buffer("reduce_scatter", "input", in, in_bytes, type);
  check_buffer("reduce_scatter", "output", out, out_bytes, type);
  check_overlap("reduce_scatter", in, in_bytes, out, out_bytes,
                static_cast<const uint8_t*>(out) - static_cast<size_t>(rank()) * out_bytes);
  engine::CommunicatorImpl* impl = impl_.get();
  std::string what = describe("reduce_scatter", recv_count, type) + " " + to_string(op);
  HostBody host = [=](algo::Channel& ch, const void* from, void* to) {
    algo::reduce_scatter_ring(ch, from, to, recv_count, type, op);
  };
  DeviceIssue device;
  if (impl->single_node()) {  // through peer memory: shared memory, or CUDA IPC for device buffers
    what += " [node]";
    host = [=](algo::Channel& ch, const void* from, void* to) {
      algo::reduce_scatter_node(algo::Issue::of(ch), impl->host_memory(), from, to, recv_count, type, op);
    };
    device = [=](const algo::Issue& issue, DevicePath& path) -> algo::NetworkStage::Job {
      algo::reduce_scatter_node(issue, impl->device_node_memory(issue, path), in, out, recv_count, type, op);
      return nullptr;
    };
  }
  const Buffers buffers{in, in_bytes, out, out_bytes};
  return run(*impl, device_of("reduce_scatter", buffers), what,
             op_descriptor(engine::kOpReduceScatter, recv_count, type, op), buffers, options, host, device);
}

Work Communicator::allgather(const void* in, void* out, size_t send_count, DataType type, const CallOptions& options) {
  size_t in_bytes = checked_bytes("allgather", send_count, type);
  size_t out_bytes = checked_bytes("allgather", send_count, type, static_cast<size_t>(size()));
  check_buffer("allgather", "input", in, in_bytes, type);
  check_buffer("allgather", "output", out, out_bytes, type);
  check_overlap("allgather", in, in_bytes, out, out_bytes,
                static_cast<const uint8_t*>(out) + static_cast<size_t>(rank()) * in_bytes);
  engine::CommunicatorImpl* impl = impl_.get();
  std::string what = describe("allgather", send_count, type);
  HostBody host = [=](algo::Channel& ch, const void* from, void* to) {
    algo::allgather_ring(ch, from, to, send_count, type);
  };
  DeviceIssue device;
  if (impl->single_node()) {  // through peer memory: shared memory, or CUDA IPC for device buffers
    what += " [node]";
    host = [=](algo::Channel& ch, const void* from, void* to) {
      algo::allgather_node(algo::Issue::of(ch), impl->host_memory(), from, to, send_count, type);
    };
    device = [=](const algo::Issue& issue, DevicePath& path) -> algo::NetworkStage::Job {
      algo::allgather_node(issue, impl->device_node_memory(issue, path), in, out, send_count, type);
      return nullptr;
    };
  }
  const Buffers buffers{in, in_bytes, out, out_bytes};
  return run(*impl, device_of("allgather", buffers), what, op_descriptor(engine::kOpAllgather, send_count, type),
             buffers, options, host, device);
}

Work Communicator::broadcast(const void* in, void* out, size_t count, DataType type, int root,
                             const CallOptions& options) {
  size_t bytes = checked_bytes("broadcast", count, type);
  check_rank("broadcast", "root", root, size());
  if (rank() == root) check_buffer("broadcast", "input", in, bytes, type);
  check_buffer("broadcast", "output", out, bytes, type);
  if (rank() == root) check_overlap("broadcast", in, bytes, out, bytes, out);
  const Buffers buffers{in, rank() == root ? bytes : 0, out, bytes};
  return run(*impl_, device_of("broadcast", buffers),
             describe("broadcast", count, type) + " root " + std::to_string(root),
             op_descriptor(engine::kOpBroadcast, count, type, ReduceOp::kSum, root), buffers, options,
             [=](algo::Channel& ch, const void* from, void* to) { algo::broadcast_chain(ch, from, to, bytes, root); });
}

Work Communicator::reduce(const void* in, void* out, size_t count, DataType type, ReduceOp op, int root,
                          const CallOptions& options) {
  size_t bytes = checked_bytes("reduce", count, type);
  check_op("reduce", type, op);
  check_rank("reduce", "root", root, size());
  check_buffer("reduce", "input", in, bytes, type);
  if (rank() == root) {
    check_buffer("reduce", "output", out, bytes, type);
    check_overlap("reduce", in, bytes, out, bytes, out);
  }
  const Buffers buffers{in, bytes, out, rank() == root ? bytes : 0};
  return run(
      *impl_, device_of("reduce", buffers),
      describe("reduce", count, type) + " " + to_string(op) + " root " + std::to_string(root),
      op_descriptor(engine::kOpReduce, count, type, op, root), buffers, options,
      [=](algo::Channel& ch, const void* from, void* to) { algo::reduce_chain(ch, from, to, count, type, op, root); });
}

Work Communicator::alltoall(const void* in, void* out, size_t count_per_rank, DataType type,
                            const CallOptions& options) {
  size_t block = checked_bytes("alltoall", count_per_rank, type);
  size_t bytes = checked_bytes("alltoall", count_per_rank, type, static_cast<size_t>(size()));
  check_buffer("alltoall", "input", in, bytes, type);
  check_buffer("alltoall", "output", out, bytes, type);
  check_overlap("alltoall", in, bytes, out, bytes, out);
  const Buffers buffers{in, bytes, out, bytes};
  return run(*impl_, device_of("alltoall", buffers), describe("alltoall", count_per_rank, type),
             op_descriptor(engine::kOpAlltoall, count_per_rank, type), buffers, options,
             [=](algo::Channel& ch, const void* from, void* to) { algo::alltoall_pairwise(ch, from, to, block); });
}

Work Communicator::barrier() {
  return impl_->enqueue_collective("barrier", {engine::kOpBarrier},
                                   [](algo::Channel& ch) { algo::barrier_dissemination(ch); });
}

Work Communicator::send(const void* buf, size_t count, DataType type, int peer, uint32_t tag) {
  size_t bytes = checked_bytes("send", count, type);
  check_rank("send", "peer", peer, size());
  if (peer == rank()) throw InvalidUsageError("send: peer " + std::to_string(peer) + " is this rank");
  check_buffer("send", "input", buf, bytes, type);
  check_host("send", buf, bytes);
  auto context = impl_->context();
  int me = rank();
  return impl_->enqueue_p2p(
      describe("send", count, type) + " to rank " + std::to_string(peer), peer,
      [=](transport::Endpoint& ep) { return ep.isend(peer, algo::p2p_tag(context, me, tag), buf, bytes); });
}

Work Communicator::recv(void* buf, size_t count, DataType type, int peer, uint32_t tag) {
  size_t bytes = checked_bytes("recv", count, type);
  if (peer != kAnySource) check_rank("recv", "peer", peer, size());
  if (peer == rank()) throw InvalidUsageError("recv: peer " + std::to_string(peer) + " is this rank");
  check_buffer("recv", "output", buf, bytes, type);
  check_host("recv", buf, bytes);
  auto context = impl_->context();
  if (peer == kAnySource) {
    // The sender's rank is a field of the p2p tag: ignoring that field matches a message from anyone, and the
    // completed tag names who sent it (PendingP2P hands it to Work::source()).
    return impl_->enqueue_p2p(describe("recv", count, type) + " from any rank", peer, [=](transport::Endpoint& ep) {
      return ep.irecv(-1, algo::p2p_tag(context, 0, tag), algo::kP2pSourceBits, buf, bytes);
    });
  }
  return impl_->enqueue_p2p(
      describe("recv", count, type) + " from rank " + std::to_string(peer), peer,
      [=](transport::Endpoint& ep) { return ep.irecv(peer, algo::p2p_tag(context, peer, tag), 0, buf, bytes); });
}

void Communicator::abort() { impl_->abort(); }

void Communicator::set_timeout(std::chrono::milliseconds timeout) { impl_->set_timeout(timeout); }

bool Communicator::device_buffers_supported() { return engine::device_path_built(); }

std::string Communicator::allreduce_algorithm(size_t bytes, bool device_buffers) const {
  return algo::to_string(impl_->choose_allreduce(bytes, device_buffers));
}

const Layout& Communicator::layout() const { return impl_->layout(); }

}  // namespace hiercoll
