// The public Communicator: checks every argument on the caller's thread (so bad input is an immediate
// InvalidUsageError and leaves the communicator usable), then hands the work to the progress thread.
#include "hiercoll/communicator.hpp"

#include <algorithm>
#include <cstring>
#include <functional>

#include "algo/channel.hpp"
#include "base/settings.hpp"
#include "engine/collective.hpp"
#include "engine/communicator_impl.hpp"
#include "engine/validate.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll {

using engine::check_buffer;
using engine::check_host;
using engine::check_rank;
using engine::checked_bytes;
using engine::Collective;
using engine::CommunicatorImpl;

namespace {

std::string describe(const char* op, size_t count, DataType type) {
  std::string out;
  record::describe_into(out, op, count, type);
  return out;
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

// Every collective takes the one path of engine/collective.cpp.
Work Communicator::allreduce(const void* in, void* out, size_t count, DataType type, ReduceOp op,
                             const CallOptions& options) {
  return impl_->collective({algo::Kind::kAllreduce, in, out, count, type, op, -1, options});
}

Work Communicator::reduce_scatter(const void* in, void* out, size_t recv_count, DataType type, ReduceOp op,
                                  const CallOptions& options) {
  return impl_->collective({algo::Kind::kReduceScatter, in, out, recv_count, type, op, -1, options});
}

Work Communicator::allgather(const void* in, void* out, size_t send_count, DataType type, const CallOptions& options) {
  return impl_->collective({algo::Kind::kAllgather, in, out, send_count, type, ReduceOp::kSum, -1, options});
}

Work Communicator::broadcast(const void* in, void* out, size_t count, DataType type, int root,
                             const CallOptions& options) {
  return impl_->collective({algo::Kind::kBroadcast, in, out, count, type, ReduceOp::kSum, root, options});
}

Work Communicator::reduce(const void* in, void* out, size_t count, DataType type, ReduceOp op, int root,
                          const CallOptions& options) {
  return impl_->collective({algo::Kind::kReduce, in, out, count, type, op, root, options});
}

Work Communicator::alltoall(const void* in, void* out, size_t count_per_rank, DataType type,
                            const CallOptions& options) {
  return impl_->collective({algo::Kind::kAlltoall, in, out, count_per_rank, type, ReduceOp::kSum, -1, options});
}

Work Communicator::barrier() {
  return impl_->collective({algo::Kind::kBarrier, nullptr, nullptr, 0, DataType::kUInt8, ReduceOp::kSum, -1, {}});
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
void Communicator::on_failure(FailureCallback callback) { impl_->on_failure(std::move(callback)); }

bool Communicator::device_buffers_supported() { return gpu::device_path_built(); }

std::string Communicator::allreduce_algorithm(size_t bytes, bool device_buffers) const {
  return algo::to_string(impl_->choose_allreduce(bytes, device_buffers));
}

const Layout& Communicator::layout() const { return impl_->layout(); }
Tuning Communicator::tuning() const { return impl_->tuning(); }
std::string Communicator::fabric_nic() const { return impl_->fabric_nic(); }
Communicator::FabricStats Communicator::fabric_stats() const {
  const transport::Endpoint::Stats stats = impl_->fabric_stats();
  FabricStats out;
  out.registrations_made = stats.registrations_made;
  out.registrations_held = stats.registrations_held;
  out.addresses_inserted = stats.addresses_inserted;
  const transport::FabricCensus census = transport::fabric_census();
  out.process_fabrics = census.fabrics;
  out.process_domains = census.domains;
  out.process_endpoints = census.endpoints;
  return out;
}
std::string Communicator::flight_record() const { return impl_->flight_record(); }

Communicator Communicator::from_env(CommOptions options) {
  Rendezvous rendezvous = rendezvous_from_env(options.timeout);
  return create(std::move(rendezvous.store), rendezvous.rank, rendezvous.size, std::move(options));
}

}  // namespace hiercoll
