#pragma once
// hiercoll records its collectives into torch's flight recorder itself (torch >= 2.15), as gloo and NCCL do, so that
// torch attaches no FlightRecorderHook to its groups: the hook's pre- and post-hooks, run around every c10d call,
// cost more than the rest of the binding (docs/torch.md, "The flight recorder"). torch's tools read the same
// record: entries go into the recorder instance torch keeps for the backend name "hiercoll"
// (c10d::getFlightRecorder, exported by libtorch_cpu: FlightRecorder<c10::Event>::get() is not, and instantiated
// here it would be a private, empty one), named "hiercoll:<op>" with their sizes and state, retired with their
// durations when they complete; a group that fails dumps it where torch's own dump on failure goes
// (TORCH_FR_DUMP_TEMP_FILE<rank>, c10d::try_dump_fr_trace_file). hiercoll_torch tells torch by adding "hiercoll" to
// distributed_c10d's _FR_SELF_RECORDING_BACKENDS, which is what stops it from attaching the hook.
//
// Threads: record() on the calling thread (the stack it captures is the caller's); retire() on whichever thread
// completes the Work; dump() on the abort-hook thread (hooks.hpp). torch's recorder has its own lock.
#include <ATen/core/Tensor.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "compat.hpp"

namespace c10d {
class Backend;
struct ProcessGroupStatus;
}  // namespace c10d

namespace hiercoll_torch {

// torch 2.15's recorder registry (getFlightRecorder) came with the completion hooks. The recorder's member templates
// (FlightRecorderDetail.hpp) include nlohmann/json.hpp, which torch's wheels do not ship: an adapter built where it
// is missing (python -m hiercoll_torch.build_adapter on a host without nlohmann-json3-dev) leaves the recording to
// torch's hook, as before.
#if HIERCOLL_TORCH_HAS_HOOKS && __has_include(<nlohmann/json.hpp>)
#define HIERCOLL_TORCH_RECORDS_NATIVELY 1
#else
#define HIERCOLL_TORCH_RECORDS_NATIVELY 0
#endif

class GroupRecord {
 public:
  /// Where an entry is in the recorder's ring; empty where the recorder is off (TORCH_FR_BUFFER_SIZE=0).
  struct Entry {
    std::optional<size_t> id, epoch;
  };

  /// Whether this build records natively: hiercoll_torch then keeps torch from attaching its hook.
  static constexpr bool native() { return HIERCOLL_TORCH_RECORDS_NATIVELY != 0; }

  /// `global_ranks`: the group's members' ranks in the default group (the dump names the file by this process's).
  GroupRecord(int group_rank, std::vector<uint64_t> global_ranks, std::chrono::milliseconds timeout);
  ~GroupRecord();
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }
  /// Whether this group's calls are recorded (all are, unless turned off: the benchmark's recorder-off column).
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  void enable(bool on) { enabled_.store(on, std::memory_order_relaxed); }

  /// Records a call as issued ("scheduled"): its op (named "hiercoll:all_reduce" and so on), its sequence number
  /// among the group's collectives (or point-to-point calls, where `p2p`), its tensors.
  Entry record(const c10d::Backend& group, c10d::OpType op, uint64_t sequence, bool p2p,
               const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs);
  /// The call completed successfully after `duration_ms`: the entry reads "completed". A failed call is never
  /// retired, as torch's own backends leave it: it reads "scheduled", the call that did not finish.
  static void retire(const Entry& entry, std::optional<float> duration_ms);
  /// A call recorded before it was issued, kept on the calling thread until its Work takes it (submit()); issue()
  /// drops whatever a call that threw left behind.
  static void stash(Entry entry);
  static bool take_stashed(Entry& entry);
  static void drop_stashed();
  /// Writes the record to torch's dump file for this process, unless TORCH_FR_DUMP_ON_TIMEOUT (or
  /// TORCH_NCCL_DUMP_ON_TIMEOUT) says not to. Blocks while torch symbolizes the stacks (seconds).
  static void dump();

 private:
  const int group_rank_;
  const std::vector<uint64_t> global_ranks_;
  std::chrono::milliseconds timeout_;
  const size_t pg_id_;  // this process's groups numbered in creation order, as ProcessGroupNCCL's uid
  std::shared_ptr<c10d::ProcessGroupStatus> status_;
  std::once_flag named_;  // the group's name, description and ranks told to the recorder at its first record
  std::tuple<std::string, std::string> name_;
  std::atomic<uint64_t> op_id_{0};  // every call's, collectives and point-to-point
  std::atomic<bool> enabled_{true};
};

}  // namespace hiercoll_torch
