#include "algo/agreement.hpp"

#include <cstring>
#include <vector>

#include "algo/algorithms.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll::algo {

namespace {
// The check shares the operation's sequence number, so its messages are kept apart by step: the ring allgather
// below takes steps base..base+n-2, which must stay inside the tag's 16 step bits without wrapping onto the
// operation's first steps (a base of 0xF000 wrapped above 4096 ranks). The operation's own steps reach the check's
// range only after 32768 steps, the same wrap-around argument as Channel's (channel.cpp): a rank cannot get that
// far into an operation while the peer it sends to has not finished the check and started it.
constexpr uint32_t kAgreementStepBase = 0x8000;
static_assert(kAgreementStepBase + kMaxWorldRanks - 1 <= 0xFFFF, "the check's steps must not wrap");

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
  ring_phase_allgather(check, all.data(), Segments::blocks(sizeof(OpDescriptor), n), 1);
  for (int r = 0; r < n; ++r) {
    if (!same(all[static_cast<size_t>(r)], mine)) {
      throw InvalidUsageError("collective mismatch: rank " + std::to_string(ch.world_rank(ch.rank())) + " called " +
                              describe(mine) + " but rank " + std::to_string(ch.world_rank(r)) + " called " +
                              describe(all[static_cast<size_t>(r)]));
    }
  }
}

}  // namespace hiercoll::algo
