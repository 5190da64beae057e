#include "algo/agreement.hpp"

#include <cstring>
#include <vector>

#include "algo/algorithms.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll::algo {

namespace {
// Steps of the check live far above any operation's own steps, so its messages never match theirs.
constexpr uint32_t kAgreementStepBase = 0xF000;

bool same(const OpDescriptor& a, const OpDescriptor& b) {
  return a.kind == b.kind && a.type == b.type && a.op == b.op && a.root == b.root && a.count == b.count;
}
}  // namespace

void check_agreement(Channel& ch, const OpDescriptor& mine, std::string (*describe)(const OpDescriptor&)) {
  const int n = ch.size();
  if (n == 1) return;
  std::vector<OpDescriptor> all(static_cast<size_t>(n));
  all[static_cast<size_t>(ch.rank())] = mine;
  std::vector<int> ranks(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) ranks[static_cast<size_t>(r)] = ch.world_rank(r);
  Channel check = ch.subgroup(ranks, ch.rank(), kAgreementStepBase);
  ring_allgather(check, all.data(), Segments::blocks(sizeof(OpDescriptor), n), 1);
  for (int r = 0; r < n; ++r) {
    if (!same(all[static_cast<size_t>(r)], mine)) {
      throw InvalidUsageError("collective mismatch: rank " + std::to_string(ch.world_rank(ch.rank())) + " called " +
                              describe(mine) + " but rank " + std::to_string(ch.world_rank(r)) + " called " +
                              describe(all[static_cast<size_t>(r)]));
    }
  }
}

}  // namespace hiercoll::algo
