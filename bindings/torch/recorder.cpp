#include "recorder.hpp"

#include <c10/util/Logging.h>

#include <array>
#include <string>
#include <utility>

#if HIERCOLL_TORCH_RECORDS_NATIVELY
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/FlightRecorderDetail.hpp>
#include <torch/csrc/distributed/c10d/Utils.hpp>
#include <torch/csrc/distributed/c10d/logger.hpp>
#endif

namespace hiercoll_torch {

namespace {
thread_local std::optional<GroupRecord::Entry> stashed;
}  // namespace

void GroupRecord::stash(Entry entry) { stashed = entry; }
bool GroupRecord::take_stashed(Entry& entry) {
  if (!stashed) return false;
  entry = *stashed;
  stashed.reset();
  return true;
}
void GroupRecord::drop_stashed() { stashed.reset(); }

#if HIERCOLL_TORCH_RECORDS_NATIVELY
namespace {

constexpr const char* kBackend = "hiercoll";

// The ops as torch's flight record names them, "hiercoll:" and the names torch's own hook gave them, made once: an
// entry's name is copied into it per call.
const std::string& profiling_name(c10d::OpType type) {
  static const auto names = [] {
    const std::pair<c10d::OpType, const char*> rows[] = {
        {c10d::OpType::BROADCAST, "broadcast"},
        {c10d::OpType::ALLREDUCE, "all_reduce"},
        {c10d::OpType::ALLREDUCE_COALESCED, "all_reduce_coalesced"},
        {c10d::OpType::REDUCE, "reduce"},
        {c10d::OpType::ALLGATHER, "all_gather"},
        {c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor"},
        {c10d::OpType::ALLGATHER_COALESCED, "all_gather_coalesced"},
        {c10d::OpType::GATHER, "gather"},
        {c10d::OpType::SCATTER, "scatter"},
        {c10d::OpType::REDUCE_SCATTER, "reduce_scatter"},
        {c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor"},
        {c10d::OpType::ALLTOALL_BASE, "all_to_all_single"},
        {c10d::OpType::ALLTOALL, "all_to_all"},
        {c10d::OpType::SEND, "send"},
        {c10d::OpType::RECV, "recv"},
        {c10d::OpType::RECVANYSOURCE, "recv_any_source"},
        {c10d::OpType::BARRIER, "barrier"},
        {c10d::OpType::COALESCED, "coalesced"},
    };
    std::array<std::string, 256> table;
    table.fill(std::string(kBackend) + ":unknown");
    for (const auto& [type, name] : rows) table[static_cast<uint8_t>(type)] = std::string(kBackend) + ":" + name;
    return table;
  }();
  return names[static_cast<uint8_t>(type)];
}

// torch's instance for the backend, the one its dump functions read (recorder.hpp says why not get()).
c10d::FlightRecorder<c10::Event>* recorder() {
  static c10d::FlightRecorder<c10::Event>* const instance = c10d::getFlightRecorder(kBackend);
  return instance;
}

size_t next_group_id() {
  static std::atomic<size_t> groups{0};
  return groups.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

GroupRecord::GroupRecord(int group_rank, std::vector<uint64_t> global_ranks, std::chrono::milliseconds timeout)
    : group_rank_(group_rank),
      global_ranks_(std::move(global_ranks)),
      timeout_(timeout),
      pg_id_(next_group_id()),
      status_(std::make_shared<c10d::ProcessGroupStatus>()) {}

GroupRecord::~GroupRecord() = default;

GroupRecord::Entry GroupRecord::record(const c10d::Backend& group, c10d::OpType op, uint64_t sequence, bool p2p,
                                       const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) {
  c10d::FlightRecorder<c10::Event>* fr = recorder();
  if (fr == nullptr || !fr->enabled_ || !enabled()) return {};
  // torch sets the group's name and description after making the backend: read at the first record, and the
  // members told to the recorder then (the dump's pg_config), with this process's rank (its file's name).
  std::call_once(named_, [&] {
    name_ = std::make_tuple(group.getGroupUid(), group.getGroupDesc());
    std::vector<uint64_t> ranks = global_ranks_;
    if (ranks.empty()) {
      for (int r = 0; r < group.getSize(); ++r) ranks.push_back(static_cast<uint64_t>(r));
    }
    fr->record_pg_ranks(name_, ranks);
    if (group_rank_ >= 0 && static_cast<size_t>(group_rank_) < ranks.size())
      fr->setRank(static_cast<int>(ranks[static_cast<size_t>(group_rank_)]));
  });
  const uint64_t op_id = op_id_.fetch_add(1, std::memory_order_relaxed) + 1;
  const auto where =
      fr->recordWithResetEnabled(pg_id_, name_, p2p ? 0 : sequence, p2p ? sequence : 0, op_id, profiling_name(op),
                                 inputs, outputs, nullptr, nullptr, timeout_, status_, p2p);
  return {where.id, where.reset_epoch};
}

void GroupRecord::retire(const Entry& entry, std::optional<float> duration_ms) {
  if (!entry.id) return;
  if (c10d::FlightRecorder<c10::Event>* fr = recorder()) fr->retire_completed(entry.id, entry.epoch, duration_ms);
}

void GroupRecord::dump() {
  // torch's switches, read by torch's own helper with their defaults as its backends read them (FlightRecorder.hpp).
  if (!c10d::getCvarBool(c10d::TORCH_FR_DUMP_ON_TIMEOUT, true)) return;
  const bool stacks = c10d::getCvarBool(c10d::TORCH_INCLUDE_STACK_TRACE, true);
  const bool only_active = c10d::getCvarBool(c10d::TORCH_INCLUDE_ONLY_ACTIVE, false);
  try {
    c10d::try_dump_fr_trace_file(/*includeCollectives=*/true, stacks, only_active, kBackend);
  } catch (const std::exception& e) {
    LOG(WARNING) << "hiercoll: torch's flight record was not dumped: " << e.what();
  }
}

#else  // torch before 2.15: its recorder has no instance for other backends; nothing is recorded

GroupRecord::GroupRecord(int group_rank, std::vector<uint64_t> global_ranks, std::chrono::milliseconds timeout)
    : group_rank_(group_rank), global_ranks_(std::move(global_ranks)), timeout_(timeout), pg_id_(0) {}
GroupRecord::~GroupRecord() = default;
GroupRecord::Entry GroupRecord::record(const c10d::Backend&, c10d::OpType, uint64_t, bool,
                                       const std::vector<at::Tensor>&, const std::vector<at::Tensor>&) {
  return {};
}
void GroupRecord::retire(const Entry&, std::optional<float>) {}
void GroupRecord::dump() {}

#endif

}  // namespace hiercoll_torch
