#pragma once
// Which CPUs the ranks share: whether a waiting rank may spin, and how many ranks contend for each core when they all
// send and receive at once (the cost model's CPU term, algo/select.hpp).
#include <string>
#include <vector>

namespace hiercoll::topo {

/// The CPUs this process may run on (its affinity mask): the node's ranks are taken to share them, as under
/// torchrun, a container's CPU set or a launcher started under taskset. A process pinned to a single CPU is taken
/// to be one of ranks that a launcher pinned one per core (mpirun --bind-to core), and the figure is the machine's
/// online CPUs instead.
int cpus_for_local_ranks();

/// Which node this process runs on, when nothing names it (HIERCOLL_NODE_ID): the host name and the kernel's boot
/// id, as NCCL's host hash, and the file system its shared-memory segments live in (/dev/shm's device number). The
/// host name alone takes containers started with one --hostname on different machines for one node; the boot id
/// alone, network namespaces of one machine that emulate nodes under names of their own. The device: containers of
/// one machine with one host name and a /dev/shm each (docker's default, without --ipc=host) cannot attach each
/// other's segments and are two nodes; one /dev/shm bind-mounted into both is one. On one boot a device number names
/// one mounted file system, so equal numbers prove that the segments one rank makes are there for the other.
/// `boot_id` empty (no /proc): the host name alone; `shm_device` empty (no /dev/shm): left out.
std::string node_identity(const std::string& host_name, const std::string& boot_id,
                          const std::string& shm_device = "");
/// This process's: gethostname(), /proc/sys/kernel/random/boot_id and stat("/dev/shm").
std::string node_identity();
/// The machine alone (host name and boot id, not the shared-memory file system): what network_identity is made of,
/// since containers with a /dev/shm each may still share a network.
std::string host_identity();

/// This rank's place on its machine, to gather from every rank at start-up: the kernel's boot id (one per booted
/// machine, the same in each of its containers and network namespaces, so nodes emulated on one host share it)
/// and the CPUs it may run on (its affinity mask, in hex). Short: tens of bytes however many CPUs there are.
std::string cpu_share();

/// The CPUs a cpu_share() names, in increasing order; none for a share that cannot be read.
std::vector<int> share_cpus(const std::string& share);

/// The most ranks that may run on one rank's CPUs, per CPU, over every rank: for each rank of `shares` (every rank's
/// cpu_share()), the ranks on its machine whose CPUs overlap its own, itself included, over the number of its CPUs.
/// The largest, because the slowest rank sets a collective's pace, and every rank computes the same figure from
/// the same shares, as the ranks' algorithm choices must agree. Ranks pinned a core each count 1; 8 ranks sharing
/// a 96-CPU node 1/12; 64 ranks of 16 emulated nodes on a 2-CPU host 32. A share that cannot be read (a kernel
/// without a boot id) is left out; none readable gives 1.
double ranks_per_cpu(const std::vector<std::string>& shares);

}  // namespace hiercoll::topo
