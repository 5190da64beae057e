#pragma once
// How many CPUs the ranks of this node have to share, for deciding whether a waiting rank may spin.

namespace hiercoll::topo {

/// The CPUs this process may run on (its affinity mask): the node's ranks are taken to share them, as under
/// torchrun, a container's CPU set or a launcher started under taskset. A process pinned to a single CPU is taken
/// to be one of ranks that a launcher pinned one per core (mpirun --bind-to core), and the figure is the machine's
/// online CPUs instead.
int cpus_for_local_ranks();

}  // namespace hiercoll::topo
