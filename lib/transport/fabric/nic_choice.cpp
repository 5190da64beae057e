#include "transport/fabric/nic_choice.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>
#include <tuple>

#include "base/text.hpp"
#include "hiercoll/errors.hpp"
#include "topo/net.hpp"

namespace hiercoll::transport {
namespace {

// A NIC's family: its name up to the first digit (eth0 -> eth, hcnic12 -> hcnic, ens1f0 -> ens, EFA's
// rdmap16s27-rdm -> rdmap).
std::string family_of(const std::string& name) {
  size_t end = 0;
  while (end < name.size() && !std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
  return name.substr(0, end);
}

bool starts_with(const std::string& text, const std::string& prefix) { return text.compare(0, prefix.size(), prefix) == 0; }

// hcnic2 before hcnic10, rdmap16s27 before rdmap32s27: one order on every node whatever order the provider lists
// its domains in, so that position l is the same rail everywhere.
bool natural_less(const std::string& a, const std::string& b) {
  const std::string fa = family_of(a), fb = family_of(b);
  if (fa != fb) return a < b;
  if (a.size() != b.size()) return a.size() < b.size();
  return a < b;
}

std::string list(const std::vector<NicCandidate>& candidates) {
  std::string text;
  for (const auto& c : candidates) base::append_listed(text, c.domain);
  return text.empty() ? "none" : text;
}

// Rule 2's family: device-backed first, then the most bandwidth, then the most NICs; a tie to the routed family,
// then to name order.
struct FamilyScore {
  bool physical = false;
  uint64_t speed_mbps = 0;
  size_t nics = 0;
  bool routed = false;
  auto key() const { return std::make_tuple(physical, speed_mbps, nics, routed); }
};

std::string data_family(const std::vector<NicCandidate>& pool, const std::string& toward) {
  std::map<std::string, FamilyScore> scores;
  for (const auto& c : pool) {
    FamilyScore& score = scores[family_of(c.domain)];
    score.physical = score.physical || c.physical;
    score.speed_mbps += c.speed_mbps;
    ++score.nics;
    score.routed = score.routed || c.domain == toward;
  }
  auto best = scores.begin();  // the map's name order breaks the last tie
  for (auto it = scores.begin(); it != scores.end(); ++it) {
    if (best->second.key() < it->second.key()) best = it;
  }
  return best->first;
}

std::string describe_family(const std::vector<NicCandidate>& kin) {
  uint64_t speed = 0;
  bool physical = false;
  for (const auto& c : kin) {
    speed += c.speed_mbps;
    physical = physical || c.physical;
  }
  std::string text = std::to_string(kin.size()) + " NIC(s)";
  if (speed > 0) text += ", " + std::to_string(speed / 1000) + " Gb/s";
  return text + (physical ? "" : ", virtual");
}

}  // namespace

bool spec_selects(const std::string& spec, const std::string& name) {
  std::string body = spec;
  const bool exclude = !body.empty() && body[0] == '^';
  if (exclude) body.erase(0, 1);
  bool listed = false;
  std::stringstream items(body);
  for (std::string item; std::getline(items, item, ',');) {
    if (item.empty()) continue;
    if (item[0] == '=') {
      listed = listed || name == item.substr(1);
    } else {
      listed = listed || starts_with(name, item);
    }
  }
  return exclude ? !listed : listed;
}

namespace {

// The NICs a rank may use and why: those HIERCOLL_FABRIC_IFACE selects; on one node the loopback domains (any, where
// the provider has none); across nodes the data family (rule 2) of those that reach other hosts. In name order.
std::vector<NicCandidate> eligible(const std::vector<NicCandidate>& candidates, const NicRequest& request,
                                   std::string& why) {
  std::vector<NicCandidate> pool;
  if (!request.spec.empty()) {
    for (const auto& c : candidates) {
      if (spec_selects(request.spec, c.domain)) pool.push_back(c);
    }
    if (pool.empty()) {
      throw InvalidUsageError("HIERCOLL_FABRIC_IFACE='" + request.spec + "' selects none of the provider's domains (" +
                              list(candidates) + ")");
    }
    why = "HIERCOLL_FABRIC_IFACE=" + request.spec;
  } else if (!request.across_nodes) {
    for (const auto& c : candidates) {
      if (c.loopback) pool.push_back(c);
    }
    why = "one node: loopback";
    if (pool.empty()) {  // providers without a loopback domain (shm, efa): any will do within a host
      pool = candidates;
      why = "one node";
    }
  } else {
    for (const auto& c : candidates) {
      if (!c.loopback && !topo::host_only_interface(c.domain)) pool.push_back(c);
    }
    if (pool.empty()) {
      throw InvalidUsageError("no NIC reaches the other nodes: the provider offers only " + list(candidates) +
                              " (loopback and host-only bridges are left out across nodes); set "
                              "HIERCOLL_FABRIC_IFACE to the interface that does");
    }
    why = "not loopback or host-only";
    const std::string family = data_family(pool, request.toward);
    std::vector<NicCandidate> kin;
    for (const auto& c : pool) {
      if (family_of(c.domain) == family) kin.push_back(c);
    }
    if (kin.size() < pool.size()) why = "family " + family + "* (" + describe_family(kin) + ")";
    pool = kin;
  }
  std::stable_sort(pool.begin(), pool.end(),
                   [](const NicCandidate& a, const NicCandidate& b) { return natural_less(a.domain, b.domain); });
  return pool;
}

// One local rank's near set, as positions in the pool: the NICs known near its CPUs, or the whole pool where none
// is known near or all are.
std::vector<size_t> near_set(const std::vector<NicCandidate>& pool, int local) {
  std::vector<size_t> near;
  for (size_t i = 0; i < pool.size(); ++i) {
    const auto& by_rank = pool[i].nearness;
    if (static_cast<size_t>(local) < by_rank.size() && by_rank[static_cast<size_t>(local)] == topo::Nearness::kNear)
      near.push_back(i);
  }
  if (near.empty() || near.size() == pool.size()) {
    near.resize(pool.size());
    for (size_t i = 0; i < pool.size(); ++i) near[i] = i;
  }
  return near;
}

// Every local rank's near set. A NIC near none of the node's ranks (one rank bound to one socket of two) would sit
// idle: there, every rank chooses among the whole pool, as bandwidth across the sockets' link outruns a NIC's.
std::vector<std::vector<size_t>> near_sets(std::vector<NicCandidate>& pool, int local_size) {
  std::vector<std::vector<size_t>> sets;
  for (int local = 0; local < local_size; ++local) sets.push_back(near_set(pool, local));
  std::vector<bool> covered(pool.size(), false);
  for (const auto& near : sets) {
    for (size_t i : near) covered[i] = true;
  }
  if (std::find(covered.begin(), covered.end(), false) != covered.end()) {
    for (auto& c : pool) c.nearness.clear();
    for (int local = 0; local < local_size; ++local) sets[static_cast<size_t>(local)] = near_set(pool, local);
  }
  return sets;
}

}  // namespace

NicChoice choose_nic(const std::vector<NicCandidate>& candidates, const NicRequest& request) {
  std::string why;
  std::vector<NicCandidate> pool = eligible(candidates, request, why);
  const int local_size = std::max(1, request.local_size);
  if (request.local_rank < 0 || request.local_rank >= local_size) {
    throw InvalidUsageError("NIC choice: local rank " + std::to_string(request.local_rank) + " of " +
                            std::to_string(local_size));
  }
  const std::vector<std::vector<size_t>> sets = near_sets(pool, local_size);
  // The local ranks that share this rank's near set share its NICs, in local rank order.
  const std::vector<size_t>& mine = sets[static_cast<size_t>(request.local_rank)];
  size_t position = 0, sharing = 0;
  for (int local = 0; local < local_size; ++local) {
    if (sets[static_cast<size_t>(local)] != mine) continue;
    if (local < request.local_rank) ++position;
    ++sharing;
  }
  if (mine.size() < pool.size()) why += ", near this rank's CPUs";
  NicChoice choice;
  for (size_t i : mine) choice.near.push_back(pool[i].domain);
  if (mine.size() > sharing) {
    for (size_t j = position; j < mine.size(); j += sharing) choice.domains.push_back(choice.near[j]);
  } else {
    choice.domains.push_back(choice.near[position % mine.size()]);
  }
  choice.domain = choice.domains.front();
  choice.why = why + "; position " + std::to_string(position) + " of " + std::to_string(sharing) +
               " local rank(s) on " + std::to_string(mine.size()) + " NIC(s)";
  return choice;
}

}  // namespace hiercoll::transport
