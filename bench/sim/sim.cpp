// hiercoll_sim: predicts allreduce time on a cluster from link figures, with the library's own cost model
// (lib/algo/select.cpp), for the hierarchical algorithm, the sharded reduction servers, a flat ring over all GPUs
// (stock NCCL/DDP) and a tree; and predicts an ALBERT training step with bucketed overlap.
//
//   hiercoll_sim allreduce --nodes 2,4 --local 8 --bytes 1M,64M [link flags]      -> CSV rows
//   hiercoll_sim albert --nodes 1,2,4,8,16 [--compute-ms 250] [--grad-mb 46.8] [--sharded-net-gbps G] [link flags]
// Link flags: --intra-gbps (per-rank intra-node bandwidth, GB/s) --intra-lat-us --net-gbps (per-node network
// bandwidth over all NICs, GB/s) --net-lat-us --net-overhead-us (CPU per message sent or received) --ranks-per-cpu
// (ranks sharing each core; 1: a core each) --nics N --nic-gbps G (the node's network as N NICs of G GB/s each, in
// place of --net-gbps: as many of them as the node's ranks drive, every one where a rank stripes over its share, the
// library's way, or one per rank with --stripe 0, as before striping). Defaults: a p4d-like node, 8 x A100 on NVLink (150 GB/s, 5 us) and
// 4 x 100 Gb/s EFA at the ~12.5 GB/s NCCL reached over it (30 us), HIERCOLL_NET_OVERHEAD_US's default, a core each.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "algo/select.hpp"
#include "hiercoll/topology.hpp"

using hiercoll::Layout;
using hiercoll::algo::CostModel;

namespace {

struct Options {
  std::string mode;
  std::vector<int> nodes = {2, 4, 8, 16};
  int local = 8;
  std::vector<double> bytes = {64 << 20};
  double compute_ms = 100, grad_mb = 46.8, overlap = 0.66, bucket_mb = 25;
  double sharded_net_gbps = 0;  ///< the network as the sharded servers' flows see it (0: as the ring sees it)
  int nics = 0;                 ///< NICs per node (0: --net-gbps gives the node's network)
  double nic_gbps = 12.5;       ///< each NIC's rate
  bool stripe = true;           ///< a rank drives every NIC of its share (transport/striped_endpoint.hpp)
  int nics_used = 0;
  CostModel model = CostModel::from(hiercoll::base::Settings::defaults());
};

std::vector<double> parse_list(const std::string& text, bool sizes) {
  std::vector<double> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    double v = std::strtod(item.c_str(), &end);
    if (sizes && *end == 'K') v *= 1 << 10;
    if (sizes && *end == 'M') v *= 1 << 20;
    if (sizes && *end == 'G') v *= 1 << 30;
    values.push_back(v);
  }
  return values;
}

Options parse(int argc, char** argv) {
  Options o;
  o.model.shm = {5, 150};  // NVLink-class intra-node
  // 4 x 100 Gb/s EFA is 50 GB/s of line rate per node; what NCCL reached over it in 2020 was about a
  // quarter of that, which is the default here (an assumption: --net-gbps sets it).
  o.model.net = {30, 12.5};
  o.model.shm_piece_bytes = 4 << 20;
  if (argc < 2) throw std::runtime_error("usage: hiercoll_sim allreduce|albert [flags]");
  o.mode = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--nodes") {
      o.nodes.clear();
      for (double v : parse_list(value, false)) o.nodes.push_back(static_cast<int>(v));
    } else if (flag == "--local") o.local = std::atoi(value.c_str());
    else if (flag == "--bytes") o.bytes = parse_list(value, true);
    else if (flag == "--intra-gbps") o.model.shm.bandwidth_gbps = std::atof(value.c_str());
    else if (flag == "--intra-lat-us") o.model.shm.latency_us = std::atof(value.c_str());
    else if (flag == "--net-gbps") o.model.net.bandwidth_gbps = std::atof(value.c_str());
    else if (flag == "--net-lat-us") o.model.net.latency_us = std::atof(value.c_str());
    else if (flag == "--net-overhead-us") o.model.net.overhead_us = std::atof(value.c_str());
    else if (flag == "--ranks-per-cpu") o.model.ranks_per_cpu = std::atof(value.c_str());
    else if (flag == "--piece-bytes") o.model.shm_piece_bytes = static_cast<size_t>(parse_list(value, true)[0]);
    else if (flag == "--compute-ms") o.compute_ms = std::atof(value.c_str());
    else if (flag == "--grad-mb") o.grad_mb = std::atof(value.c_str());
    else if (flag == "--overlap") o.overlap = std::atof(value.c_str());
    else if (flag == "--bucket-mb") o.bucket_mb = std::atof(value.c_str());
    else if (flag == "--sharded-net-gbps") o.sharded_net_gbps = std::atof(value.c_str());
    else if (flag == "--nics") o.nics = std::atoi(value.c_str());
    else if (flag == "--nic-gbps") o.nic_gbps = std::atof(value.c_str());
    else if (flag == "--stripe") o.stripe = std::atoi(value.c_str()) != 0;
    else throw std::runtime_error("unknown flag " + flag);
  }
  if (o.nics > 0) {
    // Ranks take NICs by position (transport/fabric/nic_choice.hpp): where NICs outnumber ranks each rank's share is
    // several, all driven when it stripes, only the first otherwise.
    o.nics_used = o.stripe ? o.nics : std::min(o.nics, o.local);
    o.model.net.bandwidth_gbps = o.nics_used * o.nic_gbps;
  }
  return o;
}

Layout cluster(int nodes, int local) {
  std::vector<std::string> ids;
  for (int n = 0; n < nodes; ++n) ids.insert(ids.end(), static_cast<size_t>(local), "node" + std::to_string(n));
  return Layout::from_node_ids(ids, 0);
}

// A flat ring over all GPUs of a multi-node cluster: its 2(n-1) steps each move S/n, and the slowest hop is
// the one between nodes, where every one of a node's rings (NCCL channels) shares the node's NICs.
double flat_ring(const CostModel& m, double bytes, const Layout& layout) {
  if (layout.node_count == 1) {
    CostModel intra = m;
    intra.net = m.shm;
    return intra.ring(bytes, layout);
  }
  return m.ring(bytes, layout);
}

// A pipelined (double binary) tree as NCCL uses at scale: 2 log2(n) latency steps, ~2S over the link. Only here:
// hiercoll has no tree, the model compares against NCCL's.
double tree(const CostModel& m, double bytes, const Layout& layout) {
  if (layout.size == 1) return 0;
  const double depth = std::ceil(std::log2(layout.size));
  return 2 * depth * m.net.latency_us * 1e-6 + 2 * bytes / (m.net.bandwidth_gbps * 1e9);
}

double hierarchical(const CostModel& m, double bytes, const Layout& layout) { return m.hierarchical(bytes, layout); }

// SageMaker's sharded reduction servers in the hierarchical schedule (over all ranks with one rank per node).
double sharded(const CostModel& m, double bytes, const Layout& layout) {
  return m.sharded(bytes, layout, layout.local_size > 1);
}

// The gradients go out in DDP-style buckets (the first 1 MB, then --bucket-mb), each its own allreduce.
template <typename Fn>
double bucketed(const Options& o, double bytes, Fn allreduce) {
  double total = 0, left = bytes, first = std::min(bytes, 1e6);
  total += allreduce(first);
  left -= first;
  while (left > 0) {
    double bucket = std::min(left, o.bucket_mb * 1e6);
    total += allreduce(bucket);
    left -= bucket;
  }
  return total;
}

// The last bucket DDP launches (the first layers' gradients) becomes ready only as backward ends.
double last_bucket_bytes(const Options& o, double bytes) {
  double rest = bytes - std::min(bytes, 1e6);
  double full = std::floor(rest / (o.bucket_mb * 1e6));
  double tail = rest - full * o.bucket_mb * 1e6;
  return tail > 0 ? tail : std::min(rest, o.bucket_mb * 1e6);
}

// One training step: forward + backward compute, with the gradient allreduce overlapping the backward pass
// (a fraction `overlap` of the compute) bucket by bucket; what does not fit under it is added, and at least
// the last bucket's allreduce always is, since it starts only when backward ends.
double step_seconds(const Options& o, double allreduce_seconds, double last_bucket_seconds) {
  double compute = o.compute_ms * 1e-3;
  return compute + std::max(last_bucket_seconds, allreduce_seconds - o.overlap * compute);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o = parse(argc, argv);
    if (o.mode == "allreduce") {
      if (o.nics > 0)
        std::printf("# %d of %d NICs per node driven, %.1f GB/s of network per node\n", o.nics_used, o.nics,
                    o.model.net.bandwidth_gbps);
      std::printf("nodes,local,bytes,algorithm,seconds,busbw_gbps\n");
      for (int nodes : o.nodes) {
        Layout layout = cluster(nodes, o.local);
        int n = layout.size;
        for (double bytes : o.bytes) {
          struct Row {
            const char* name;
            double seconds;
          } rows[] = {{"hier", hierarchical(o.model, bytes, layout)},
                      {"sharded", sharded(o.model, bytes, layout)},
                      {"ring", flat_ring(o.model, bytes, layout)},
                      {"tree", tree(o.model, bytes, layout)}};
          for (const auto& row : rows) {
            double busbw = row.seconds > 0 ? bytes / row.seconds * 2.0 * (n - 1) / n / 1e9 : 0;
            std::printf("%d,%d,%.0f,%s,%.6f,%.3f\n", nodes, o.local, bytes, row.name, row.seconds, busbw);
          }
        }
      }
      return 0;
    }
    if (o.mode == "albert") {
      double bytes = o.grad_mb * 1e6;
      CostModel servers = o.model;  // SageMaker's scheme: the sharded servers in the hierarchical schedule
      if (o.sharded_net_gbps > 0) servers.net.bandwidth_gbps = o.sharded_net_gbps;
      std::printf(
          "# ALBERT step model: compute %.0f ms/step, gradients %.1f MB in %.0f MB buckets, %.0f%% of compute "
          "overlappable; net %.1f GB/s %.0f us per node (sharded servers: %.1f GB/s), intra %.0f GB/s %.0f us\n",
          o.compute_ms, o.grad_mb, o.bucket_mb, o.overlap * 100, o.model.net.bandwidth_gbps, o.model.net.latency_us,
          servers.net.bandwidth_gbps, o.model.shm.bandwidth_gbps, o.model.shm.latency_us);
      if (o.nics > 0)
        std::printf("# %d of %d NICs per node driven, %.1f GB/s of network per node\n", o.nics_used, o.nics,
                    o.model.net.bandwidth_gbps);
      std::printf(
          "nodes,gpus,allreduce_hier_ms,allreduce_ring_ms,step_hier_ms,step_ring_ms,efficiency_hier,"
          "efficiency_ring,speedup_hier_vs_ring,allreduce_sharded_ms,step_sharded_ms,speedup_sharded_vs_ring\n");
      for (int nodes : o.nodes) {
        Layout layout = cluster(nodes, o.local);
        double hier = bucketed(o, bytes, [&](double b) { return hierarchical(o.model, b, layout); });
        double ring = bucketed(o, bytes, [&](double b) { return flat_ring(o.model, b, layout); });
        double shard = bucketed(o, bytes, [&](double b) { return sharded(servers, b, layout); });
        double tail = last_bucket_bytes(o, bytes);
        double step_hier = step_seconds(o, hier, hierarchical(o.model, tail, layout));
        double step_ring = step_seconds(o, ring, flat_ring(o.model, tail, layout));
        double step_shard = step_seconds(o, shard, sharded(servers, tail, layout));
        double ideal = o.compute_ms * 1e-3;  // one GPU, no communication
        std::printf("%d,%d,%.2f,%.2f,%.2f,%.2f,%.3f,%.3f,%.3f,%.2f,%.2f,%.3f\n", nodes, layout.size, hier * 1e3,
                    ring * 1e3, step_hier * 1e3, step_ring * 1e3, ideal / step_hier, ideal / step_ring,
                    step_ring / step_hier, shard * 1e3, step_shard * 1e3, step_ring / step_shard);
      }
      return 0;
    }
    throw std::runtime_error("mode must be allreduce or albert");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hiercoll_sim: %s\n", e.what());
    return 2;
  }
}
