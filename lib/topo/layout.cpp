// Layout: grouping ranks into nodes by identity. Pure data, so any cluster shape is unit-testable.
#include <map>
#include <sstream>

#include "hiercoll/errors.hpp"
#include "hiercoll/topology.hpp"

namespace hiercoll {

bool Layout::regular() const {
  for (const auto& ranks : node_ranks) {
    if (ranks.size() != node_ranks.front().size()) return false;
  }
  return true;
}

std::string Layout::describe() const {
  std::ostringstream out;
  out << node_count << (node_count == 1 ? " node" : " nodes");
  if (regular()) out << " x " << node_ranks.front().size() << " ranks";
  else out << " (irregular)";
  out << ":";
  for (int n = 0; n < node_count; ++n) {
    out << " node" << n << "=[";
    for (size_t i = 0; i < node_ranks[n].size(); ++i) out << (i ? "," : "") << node_ranks[n][i];
    out << "]";
  }
  return out.str();
}

Layout Layout::from_node_ids(const std::vector<std::string>& node_ids, int rank) {
  if (node_ids.empty()) throw InvalidUsageError("Layout: no ranks");
  if (rank < 0 || rank >= static_cast<int>(node_ids.size())) throw InvalidUsageError("Layout: rank out of range");
  Layout layout;
  layout.rank = rank;
  layout.size = static_cast<int>(node_ids.size());
  std::map<std::string, int> index;  // identity -> node number, in order of first (lowest) rank
  for (int r = 0; r < layout.size; ++r) {
    auto [it, inserted] = index.emplace(node_ids[r], static_cast<int>(index.size()));
    if (inserted) layout.node_ranks.emplace_back();
    layout.node_of.push_back(it->second);
    layout.local_rank_of.push_back(static_cast<int>(layout.node_ranks[it->second].size()));
    layout.node_ranks[it->second].push_back(r);
  }
  layout.node_count = static_cast<int>(layout.node_ranks.size());
  layout.node = layout.node_of[rank];
  layout.local_rank = layout.local_rank_of[rank];
  layout.local_size = static_cast<int>(layout.node_ranks[layout.node].size());
  return layout;
}

}  // namespace hiercoll
