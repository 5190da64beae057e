// The table of schedules (schedules.hpp): one row per (algorithm, kind), each a few lines over lib/algo.
#include "engine/schedules.hpp"

#include <array>
#include <string>

#include "algo/algorithms.hpp"
#include "algo/network_stage.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll::engine {
namespace {

using algo::Algorithm;
using algo::Channel;
using algo::Kind;
using DeviceIssue = CommunicatorImpl::DeviceIssue;

// The hierarchical allreduce; `inter` picks its inter-node phase (rail rings, or the sharded reduction servers).
HostBody hier_host(CommunicatorImpl& impl, const Call& c, algo::InterNode inter) {
  algo::Hierarchy* hierarchy = &impl.hierarchy();
  algo::NodeMemory* memory = &impl.host_memory();
  return [=](Channel& ch, const void* in, void* out) {
    // One piece of node memory: the network phase inline; more: on the helper thread, overlapping the node's.
    algo::InlineStage here(ch);
    algo::HelperStage helper(*hierarchy->network, ch);
    algo::NetworkStage& network =
        algo::single_piece(*memory, c.count * dtype_size(c.type)) ? static_cast<algo::NetworkStage&>(here) : helper;
    algo::allreduce_hier(algo::OpContext::of(ch), *hierarchy, *memory, network, in, out, c.count, c.type, c.op, inter);
  };
}

// On device buffers its intra-node phases run on the GPUs; only the network phase crosses host memory.
DeviceIssue hier_device(CommunicatorImpl& impl, const Call& c, const void* in, void* out, algo::InterNode inter) {
  CommunicatorImpl* self = &impl;
  return [self, c, in, out, inter](const algo::OpContext& issue, gpu::DevicePath& path) {
    algo::NodeMemory& memory = self->device_node_memory(issue, path);
    algo::DeferredStage network = path.deferred_stage(issue.wait("network phase"));
    algo::allreduce_hier(issue, self->hierarchy(), memory, network, in, out, c.count, c.type, c.op, inter);
    return network.host_half();
  };
}

// Where the layout has no node structure to use (irregular, or one rank per node), the sharded servers run over all
// ranks, every rank serving 1/n; otherwise they are the hierarchical allreduce's inter-node phase.
bool sharded_flat(CommunicatorImpl& impl) { return !impl.hierarchical_eligible(); }

// A collective through one node's peer memory, the same call whichever runs it: the progress thread on host
// buffers (shared memory), the caller's thread on device buffers (CUDA IPC), or the caller's thread on host buffers.
using NodeOp = void (*)(const algo::OpContext& issue, algo::NodeMemory& memory, const Call& c, const void* in,
                        void* out);

template <NodeOp op>
HostBody node_host(CommunicatorImpl& impl, const Call& c) {
  algo::NodeMemory* memory = &impl.host_memory();
  return [memory, c](Channel& ch, const void* in, void* out) { op(algo::OpContext::of(ch), *memory, c, in, out); };
}

template <NodeOp op>
DeviceIssue node_device(CommunicatorImpl& impl, const Call& c, const void* in, void* out) {
  CommunicatorImpl* self = &impl;
  return [self, c, in, out](const algo::OpContext& issue, gpu::DevicePath& path) -> algo::NetworkStage::Job {
    op(issue, self->device_node_memory(issue, path), c, in, out);
    return nullptr;
  };
}

template <NodeOp op>
void node_here(CommunicatorImpl& impl, const algo::OpContext& issue, const Call& c, const void* in, void* out) {
  op(issue, impl.host_memory(), c, in, out);
}

void reduce_scatter_op(const algo::OpContext& issue, algo::NodeMemory& m, const Call& c, const void* in, void* out) {
  algo::reduce_scatter_node(issue, m, in, out, c.count, c.type, c.op);
}
void allgather_op(const algo::OpContext& issue, algo::NodeMemory& m, const Call& c, const void* in, void* out) {
  algo::allgather_node(issue, m, in, out, c.count, c.type);
}
void broadcast_op(const algo::OpContext& issue, algo::NodeMemory& m, const Call& c, const void* in, void* out) {
  algo::broadcast_node(issue, m, in, out, c.out_bytes, c.root);
}
void barrier_op(const algo::OpContext& issue, algo::NodeMemory& m, const Call&, const void*, void*) {
  algo::barrier_node(issue, m);
}

const Schedule kSchedules[] = {
    {Algorithm::kRing, Kind::kAllreduce,
     [](CommunicatorImpl&, const Call& c) -> HostBody {
       return [c](Channel& ch, const void* in, void* out) { algo::allreduce_ring(ch, in, out, c.count, c.type, c.op); };
     },
     nullptr, nullptr},
    {Algorithm::kRing, Kind::kReduceScatter,
     [](CommunicatorImpl&, const Call& c) -> HostBody {
       return [c](Channel& ch, const void* in, void* out) {
         algo::reduce_scatter_ring(ch, in, out, c.count, c.type, c.op);
       };
     },
     nullptr, nullptr},
    {Algorithm::kRing, Kind::kAllgather,
     [](CommunicatorImpl&, const Call& c) -> HostBody {
       return [c](Channel& ch, const void* in, void* out) { algo::allgather_ring(ch, in, out, c.count, c.type); };
     },
     nullptr, nullptr},
    {Algorithm::kRecursiveDoubling, Kind::kAllreduce,
     [](CommunicatorImpl&, const Call& c) -> HostBody {
       return [c](Channel& ch, const void* in, void* out) {
         algo::allreduce_recursive_doubling(ch, in, out, c.count, c.type, c.op);
       };
     },
     nullptr, nullptr},
    {Algorithm::kHierarchical, Kind::kAllreduce,
     [](CommunicatorImpl& impl, const Call& c) { return hier_host(impl, c, algo::InterNode::kRail); },
     [](CommunicatorImpl& impl, const Call& c, const void* in, void* out) {
       return hier_device(impl, c, in, out, algo::InterNode::kRail);
     },
     // One node: no network phase. Small inputs in one flag round, each rank reducing all of them itself
     // (allreduce_one_shot).
     [](CommunicatorImpl& impl, const algo::OpContext& issue, const Call& c, const void* in, void* out) {
       algo::NodeMemory& memory = impl.host_memory();
       if (algo::one_shot_allreduce(impl.hierarchy(), memory, c.count * dtype_size(c.type))) {
         algo::allreduce_one_shot(memory, issue.limits, in, out, c.count, c.type, c.op, issue.world);
       } else {
         algo::NoNetworkStage no_network;
         algo::allreduce_hier(issue, impl.hierarchy(), memory, no_network, in, out, c.count, c.type, c.op,
                              algo::InterNode::kRail);
       }
     },
     [](CommunicatorImpl& impl) { return algo::node_only_allreduce(impl.hierarchy(), impl.host_memory()); },
     // The one-shot's wait is unnamed.
     [](CommunicatorImpl& impl, const Call& c) -> const char* {
       return algo::one_shot_allreduce(impl.hierarchy(), impl.host_memory(), c.count * dtype_size(c.type))
                  ? algo::kOneShotPhase
                  : nullptr;
     }},
    {Algorithm::kSharded, Kind::kAllreduce,
     [](CommunicatorImpl& impl, const Call& c) -> HostBody {
       if (!sharded_flat(impl)) return hier_host(impl, c, algo::InterNode::kSharded);
       return [c](Channel& ch, const void* in, void* out) {
         algo::allreduce_sharded(ch, in, out, c.count, c.type, c.op);
       };
     },
     [](CommunicatorImpl& impl, const Call& c, const void* in, void* out) -> DeviceIssue {
       return sharded_flat(impl) ? nullptr : hier_device(impl, c, in, out, algo::InterNode::kSharded);
     },
     nullptr},
    // One node, through peer memory: shared memory for host buffers, CUDA IPC for device buffers. Broadcast on host
    // buffers only (the selector's choice); a barrier has none.
    {Algorithm::kNode, Kind::kReduceScatter, node_host<reduce_scatter_op>, node_device<reduce_scatter_op>,
     node_here<reduce_scatter_op>},
    {Algorithm::kNode, Kind::kAllgather, node_host<allgather_op>, node_device<allgather_op>, node_here<allgather_op>},
    {Algorithm::kNode, Kind::kBroadcast, node_host<broadcast_op>, nullptr, node_here<broadcast_op>},
    {Algorithm::kNode, Kind::kBarrier, node_host<barrier_op>, nullptr, node_here<barrier_op>},
    {Algorithm::kChain, Kind::kBroadcast,
     [](CommunicatorImpl&, const Call& c) -> HostBody {
       return [c](Channel& ch, const void* in, void* out) { algo::broadcast_chain(ch, in, out, c.out_bytes, c.root); };
     },
     nullptr, nullptr},
    {Algorithm::kChain, Kind::kReduce,
     [](CommunicatorImpl&, const Call& c) -> HostBody {
       return [c](Channel& ch, const void* in, void* out) {
         algo::reduce_chain(ch, in, out, c.count, c.type, c.op, c.root);
       };
     },
     nullptr, nullptr},
    {Algorithm::kPairwise, Kind::kAlltoall,
     [](CommunicatorImpl&, const Call& c) -> HostBody {
       const size_t block = c.in_bytes / static_cast<size_t>(c.world);
       return [block](Channel& ch, const void* in, void* out) { algo::alltoall_pairwise(ch, in, out, block); };
     },
     nullptr, nullptr},
    {Algorithm::kDissemination, Kind::kBarrier,
     [](CommunicatorImpl&, const Call&) -> HostBody {
       return [](Channel& ch, const void*, void*) { algo::barrier_dissemination(ch); };
     },
     nullptr, nullptr},
};

// Indexed once, so that a lookup on the small-call path is two array reads.
const std::array<std::array<const Schedule*, algo::kKindSlots>, algo::kAlgorithmCount>& index() {
  static const auto table = [] {
    std::array<std::array<const Schedule*, algo::kKindSlots>, algo::kAlgorithmCount> t{};
    for (const Schedule& s : kSchedules) t[static_cast<size_t>(s.algorithm)][static_cast<size_t>(s.kind)] = &s;
    return t;
  }();
  return table;
}

}  // namespace

const Schedule& schedule_of(Algorithm algorithm, Kind kind) {
  const size_t a = static_cast<size_t>(algorithm), k = static_cast<size_t>(kind);
  const Schedule* found = a < algo::kAlgorithmCount && k < algo::kKindSlots ? index()[a][k] : nullptr;
  if (found == nullptr) {
    throw InternalError(std::string("no schedule runs ") + algo::to_string(kind) + " with algorithm " +
                        algo::to_string(algorithm));
  }
  return *found;
}

}  // namespace hiercoll::engine
