#pragma once
// Optional collective-mismatch check (HIERCOLL_DEBUG=DETAIL or HIERCOLL_CHECK_COLLECTIVES=1): before an
// operation, every rank shares what it is about to run, and all of them fail with the same clear error
// if any rank disagrees, instead of hanging or mixing up data.
#include <cstdint>
#include <string>

#include "algo/channel.hpp"

namespace hiercoll::algo {

struct OpDescriptor {
  uint32_t kind = 0;  ///< which collective: an algo::Kind's value
  uint32_t type = 0;  ///< DataType
  uint32_t op = 0;    ///< ReduceOp (0 where none)
  int32_t root = -1;  ///< -1 where none
  uint64_t count = 0;
};

/// Exchanges descriptors with every rank of `ch`; throws InvalidUsageError naming the first rank that
/// disagrees with this one, with both descriptions. `describe` turns a descriptor into text.
void check_agreement(Channel& ch, const OpDescriptor& mine, std::string (*describe)(const OpDescriptor&));

}  // namespace hiercoll::algo
