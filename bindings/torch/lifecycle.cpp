#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <utility>

#include "hiercoll/hiercoll.h"
#include "issue.hpp"
#include "process_group.hpp"
#include "tensors.hpp"
#include "torch_store.hpp"

#if HIERCOLL_TORCH_HAS_RECONFIGURE
#include <unistd.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <unordered_set>
#include <variant>
#endif

// The group's life apart from its calls: options, splitting, health, failure and torch's hooks, monitored barriers.
namespace hiercoll_torch {

// ---- Group management and health ---------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupHiercoll::getBackendOptions() {
  auto options = c10::make_intrusive<Options>(getBackendName(), timeout_);
#if HIERCOLL_TORCH_HAS_BACKEND_SPLIT               // the release whose Options grew these fields
  options->global_ranks_in_group = global_ranks_;  // torch's flight recorder names its dump files by them
  options->group_name = name_;
#endif
  return options;
}

void ProcessGroupHiercoll::setTimeout(std::chrono::milliseconds timeout) {
  issue("set_timeout", rank_, [&] { comm().set_timeout(timeout); });
  timeout_ = timeout;
  if (record_) record_->set_timeout(timeout);
}

#if HIERCOLL_TORCH_HAS_BACKEND_SPLIT
c10::intrusive_ptr<c10d::Backend> ProcessGroupHiercoll::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                              const std::vector<int>& ranks,
                                                              const c10::intrusive_ptr<Options>& opts) {
  return issue("split", rank_, [&]() -> c10::intrusive_ptr<c10d::Backend> {
    for (int r : ranks) check_rank(r, size_, "rank", "split");
    auto me = std::find(ranks.begin(), ranks.end(), rank_);
    if (me == ranks.end()) return {};  // not a member: as ncclCommSplit's NO_COLOR
    const auto timeout = opts ? opts->timeout : timeout_;
    const std::string name = opts && !opts->group_name.empty() ? opts->group_name : "split";
    std::vector<uint64_t> global;  // torch fills them in for split_group; else from this group's own
    if (opts && opts->global_ranks_in_group.size() == ranks.size()) {
      global = opts->global_ranks_in_group;
    } else {
      for (int r : ranks) global.push_back(global_ranks_.empty() ? r : global_ranks_[r]);
    }
    return c10::make_intrusive<ProcessGroupHiercoll>(store, static_cast<int>(me - ranks.begin()),
                                                     static_cast<int>(ranks.size()), timeout, name, global);
  });
}
#endif

// ---- Fault tolerance: groups without the ranks that failed ---------------------------------------------------

#if HIERCOLL_TORCH_HAS_SHRINK
// A new group of the ranks not excluded, joined through this group's store under a name of its own: the excluded
// ranks (dead, typically) take no part. SHRINK_ABORT first aborts this group's communicator, failing what is
// pending on it; otherwise torch destroys this group once the new one is made.
c10::intrusive_ptr<c10d::Backend> ProcessGroupHiercoll::shrink(const std::vector<int64_t>& ranks_to_exclude,
                                                               int shrink_flags,
                                                               const c10::intrusive_ptr<Options>& opts_override) {
  return issue("shrink", rank_, [&]() -> c10::intrusive_ptr<c10d::Backend> {
    std::vector<bool> excluded(size_, false);
    for (int64_t r : ranks_to_exclude) {
      check_rank(static_cast<int>(r), size_, "rank to exclude", "shrink");
      TORCH_CHECK(r != rank_, "hiercoll shrink: rank ", r, " excludes itself; only the remaining ranks call shrink");
      excluded[r] = true;
    }
    constexpr int kShrinkAbort = 0x01;  // torch.distributed.SHRINK_ABORT
    if (shrink_flags & kShrinkAbort) abort_communicator();
    int new_rank = 0, new_size = 0;
    std::vector<uint64_t> global;
    for (int r = 0; r < size_; ++r) {
      if (excluded[r]) continue;
      if (r == rank_) new_rank = new_size;
      ++new_size;
      global.push_back(global_ranks_.empty() ? r : global_ranks_[r]);
    }
    const auto timeout = opts_override ? opts_override->timeout : timeout_;
    return c10::make_intrusive<ProcessGroupHiercoll>(store_, new_rank, new_size, timeout,
                                                     name_ + "/shrink" + std::to_string(++shrinks_), global);
  });
}

// A group over `store` in which this process is `rank` of `size` (ProcessGroup::merge_remote_group).
c10::intrusive_ptr<c10d::Backend> ProcessGroupHiercoll::merge(const c10::intrusive_ptr<c10d::Store>& store,
                                                              const c10::intrusive_ptr<Options>& opts, const int& rank,
                                                              const int& size) {
  return issue("merge", rank_, [&]() -> c10::intrusive_ptr<c10d::Backend> {
    TORCH_CHECK(size >= 1 && rank >= 0 && rank < size, "hiercoll merge: rank ", rank, " is outside a group of ", size);
    const auto timeout = opts ? opts->timeout : timeout_;
    const std::string name = opts && !opts->group_name.empty() ? opts->group_name : name_ + "/merge";
    std::vector<uint64_t> global;
    if (opts && opts->global_ranks_in_group.size() == static_cast<size_t>(size)) global = opts->global_ranks_in_group;
    return c10::make_intrusive<ProcessGroupHiercoll>(store, rank, size, timeout, name, global);
  });
}
#endif

#if HIERCOLL_TORCH_HAS_RECONFIGURE
namespace {
// "hiercoll:<rank>:<uuid of the last reconfigure>:<global rank>:<pid>@<host>:<nonce>". Ordered sets of handles are
// sorted as strings, which every rank does alike.
struct Handle {
  uint64_t global_rank;
};

Handle parse_handle(const std::string& handle) {
  std::vector<std::string> fields;
  size_t start = 0;
  for (size_t colon; (colon = handle.find(':', start)) != std::string::npos; start = colon + 1) {
    fields.push_back(handle.substr(start, colon - start));
  }
  fields.push_back(handle.substr(start));
  TORCH_CHECK(fields.size() == 6 && fields[0] == "hiercoll", "hiercoll reconfigure: '", handle,
              "' is not a hiercoll reconfigure handle (get_reconfigure_handle() of a hiercoll group)");
  try {
    return Handle{std::stoull(fields[3])};
  } catch (const std::exception&) {
    TORCH_CHECK(false, "hiercoll reconfigure: '", handle, "' is not a hiercoll reconfigure handle");
  }
}
}  // namespace

c10d::ReconfigureHandle ProcessGroupHiercoll::get_reconfigure_handle() const {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const uint64_t global = global_ranks_.empty() || rank_ >= static_cast<int>(global_ranks_.size())
                              ? static_cast<uint64_t>(rank_)
                              : global_ranks_[rank_];
  return c10::str("hiercoll:", rank_, ":", reconfigure_uuid_, ":", global, ":", getpid(), "@", host, ":", nonce_);
}

// The communicator is replaced by one over the ranks whose handles `opts` lists (in order, or sorted when given as
// a set), joined through this group's store under a prefix of the uuid. Every uuid is used once: each rank claims
// it in the store, so a reused one is refused on every rank at once rather than found by a timeout.
c10::intrusive_ptr<c10d::Work> ProcessGroupHiercoll::reconfigure(const c10d::ReconfigureOptions& opts) {
  return issue("reconfigure", rank_, [&]() -> c10::intrusive_ptr<c10d::Work> {
    std::vector<std::string> handles;
    std::visit([&](const auto& given) { handles.assign(given.begin(), given.end()); }, opts.handles);
    if (std::holds_alternative<std::unordered_set<c10d::ReconfigureHandle>>(opts.handles)) {
      std::sort(handles.begin(), handles.end());
    }
    TORCH_CHECK(!handles.empty(), "hiercoll reconfigure: no handles");
    TORCH_CHECK(std::unordered_set<std::string>(handles.begin(), handles.end()).size() == handles.size(),
                "hiercoll reconfigure: a handle is listed twice");
    std::vector<uint64_t> global;
    for (const auto& handle : handles) global.push_back(parse_handle(handle).global_rank);
    const std::string mine = get_reconfigure_handle();
    const auto me = std::find(handles.begin(), handles.end(), mine);
    TORCH_CHECK(me != handles.end(), "hiercoll reconfigure: this rank's handle (", mine, ") is not among the ",
                handles.size(), " given");
    const int new_rank = static_cast<int>(me - handles.begin());
    const int new_size = static_cast<int>(handles.size());
    auto store = c10::make_intrusive<c10d::PrefixStore>("hiercoll/reconfigure/" + std::to_string(opts.uuid), store_);
    const auto key = "claimed/" + std::to_string(new_rank);
    const std::vector<uint8_t> claim(mine.begin(), mine.end());
    TORCH_CHECK(store->compareSet(key, {}, claim) == claim, "hiercoll reconfigure: uuid ", opts.uuid,
                " was already used; every reconfigure() needs a new one");

    completion_.drain();  // calls on the old communicator end first (at once where it failed)
    uint64_t next;
    {
      std::lock_guard<std::mutex> lock(abort_mutex_);
      next = generation_ + 1;
    }
    auto comm =
        connect(std::make_shared<TorchStore>(store), new_rank, new_size, opts.timeout.value_or(timeout_), next);
    // The old communicator says goodbye, not abort: its peers reconfigure too, or were left out on purpose, and a
    // peer still on its way here must not take this rank's leaving for a failure (that ran its abort hooks, and
    // once aborted the communicator it had just made). One that failed was halted already and leaves at once.
    replace_communicator(std::move(comm)).reset();
    rank_ = new_rank;
    size_ = new_size;
    global_ranks_ = std::move(global);
    reconfigure_uuid_ = opts.uuid;
    sequence_ = 0;
    p2p_sequence_ = 0;
    if (record_) record_ = std::make_unique<GroupRecord>(rank_, global_ranks_, timeout_);  // a group of its own
    auto done = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    done->markCompleted(c10::IValue(std::vector<at::Tensor>()));
    return c10d::Work::create_from_future(done);
  });
}
#endif

#if HIERCOLL_TORCH_HAS_BACKEND_LIFECYCLE
c10d::ErrorType ProcessGroupHiercoll::getError() {
  auto failure = completion_.first_failure();
  if (!failure) return c10d::ErrorType::SUCCESS;
  switch (*failure) {
    case hiercoll::ErrorCode::kTimeout: return c10d::ErrorType::TIMEOUT;
    case hiercoll::ErrorCode::kRemoteError: return c10d::ErrorType::REMOTE_ERROR;
    default: return c10d::ErrorType::COMM_ERROR;
  }
}

void ProcessGroupHiercoll::abort() { abort_communicator(); }  // asked for: no abort hooks

// A clean end (destroy_process_group): every issued call completes, then the communicator closes with a goodbye,
// so that no peer reports this rank dead when its process exits, whenever that is. torch may keep the group object
// for longer (a DDP module holds it): calls on it after this raise.
void ProcessGroupHiercoll::shutdown() {
  if (barrier_failed_) abort_communicator();
  completion_.drain();
  shut_down_ = true;
  replace_communicator(nullptr).reset();
}
#endif

// A timeout, or a peer that died or aborted: the communicator is aborted, as ProcessGroupNCCL's watchdog aborts a
// timed-out communicator, which tells every peer at once through the peer watch and so runs their abort hooks too (a
// rank with nothing in flight, the one that stopped calling collectives say, dumps its record as well); then torch's
// abort hooks start on a thread of their own (its flight recorder dumps this rank's record there, for seconds when it
// gathers stack traces), and the failed Work raises at once, as gloo's does. The interpreter's exit waits for the dump
// (module.cpp, _quiesce). Runs on the completion thread, and on the thread settling a failed call before that call
// completes; it never blocks on a hook, so a reconfigure holding the GIL that a dump needs waits for neither.
void ProcessGroupHiercoll::after_failure() {
  // A communicator reconfigure() replaced since: nothing to abort or dump.
  if (!abort_communicator(failed_generation_.load())) return;
  GroupHooks::start_abort_hooks(hooks_);
}

bool ProcessGroupHiercoll::abort_communicator(std::optional<uint64_t> generation) {
  std::lock_guard<std::mutex> lock(abort_mutex_);
  if (generation && *generation != generation_) return false;
  if (comm_ && !std::exchange(communicator_aborted_, true)) comm_->abort();
  return true;
}

#if HIERCOLL_TORCH_HAS_HOOKS
void ProcessGroupHiercoll::registerCompletionHook(int64_t hook_id, c10d::CompletionHook hook) {
  hooks_->add_completion(hook_id, [hook = std::move(hook)](uint64_t key, std::optional<float> duration_ms) {
    c10d::CompletionHookArgs args;
    args.completionKey = key;
    args.duration_ms = duration_ms;
    hook(args);
  });
}

void ProcessGroupHiercoll::unregisterCompletionHook(int64_t hook_id) { hooks_->remove_completion(hook_id); }

void ProcessGroupHiercoll::registerAbortHook(int64_t hook_id, c10d::AbortHook hook) {
  hooks_->add_abort(hook_id, std::move(hook));
}

void ProcessGroupHiercoll::unregisterAbortHook(int64_t hook_id) { hooks_->remove_abort(hook_id); }
#endif

void ProcessGroupHiercoll::setSequenceNumberForGroup() {}  // every rank starts at 0: nothing to agree on

uint64_t ProcessGroupHiercoll::getSequenceNumberForGroup() { return sequence_; }

void ProcessGroupHiercoll::waitForPendingWorks() { completion_.drain(); }

namespace {

// A monitored barrier's one deadline, and the timeout as its errors say it.
struct BarrierDeadline {
  explicit BarrierDeadline(std::chrono::milliseconds timeout)
      : timeout(timeout), at(std::chrono::steady_clock::now() + timeout), ms(std::to_string(timeout.count()) + " ms") {}
  std::chrono::microseconds left() const {
    return std::chrono::duration_cast<std::chrono::microseconds>(
        std::max(at - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration::zero()));
  }
  const std::chrono::milliseconds timeout;
  const std::chrono::steady_clock::time_point at;
  const std::string ms;
};

// A failed operation's error after ": "; "" while it is still waiting.
std::string failure_of(const hiercoll::Work& work) {
  if (auto error = work.error()) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      return std::string(": ") + e.what();
    }
  }
  return std::string();
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

// Rank 0's wait for the other ranks' arrivals (arrivals[peer - 1]), each in turn; with wait_all_ranks every one gets
// the whole timeout, as in gloo. The error naming the ranks missing, in gloo's words; "" when all arrived.
std::string missing_arrivals(std::vector<hiercoll::Work>& arrivals, const BarrierDeadline& deadline,
                             bool wait_all_ranks) {
  std::vector<int> missing, arrived;
  std::string detail;
  bool out_of_time = false;
  for (size_t i = 0; i < arrivals.size() && (wait_all_ranks || missing.empty()); ++i) {
    const int peer = static_cast<int>(i) + 1;
    const auto limit = wait_all_ranks ? std::chrono::microseconds(deadline.timeout) : deadline.left();
    out_of_time = out_of_time || limit.count() == 0;
    if (arrivals[i].wait_for(limit) && !arrivals[i].error()) {
      arrived.push_back(peer);
      continue;
    }
    missing.push_back(peer);
    detail +=
        "\n hiercoll: rank " + std::to_string(peer) + " did not arrive within " + deadline.ms + failure_of(arrivals[i]);
  }
  if (missing.empty()) return std::string();
  std::string text = "[Rank 0]: Rank" + std::string(missing.size() > 1 ? "s " : " ") + rank_list(missing) +
                     " failed to pass monitoredBarrier in " + deadline.ms;
  if (out_of_time && !wait_all_ranks) {
    text += "\n Rank 0 timed out in monitoredBarrier after " + deadline.ms + ". " +
            (arrived.empty() ? "No ranks successfully processed in monitoredBarrier."
                             : "Successfully processed ranks: " + rank_list(arrived));
  }
  return text + detail;
}

}  // namespace

// Errors in gloo's words (ProcessGroupGloo::monitoredBarrier), which torch's tests and users' tools look for, each
// followed by hiercoll's detail.
void ProcessGroupHiercoll::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  const BarrierDeadline deadline(opts.timeout == c10d::kUnsetTimeout ? timeout_ : opts.timeout);
  // Every rank but 0 reports to rank 0, which then releases each. The tokens live in the Work below: a
  // rank that never arrives leaves its receive posted after this returns.
  constexpr uint32_t kArriveTag = kCollectiveTag | 1, kReleaseTag = kCollectiveTag | 2;
  std::vector<at::Tensor> tokens;
  std::vector<hiercoll::Work> works;
  auto token = [&] {
    tokens.push_back(at::zeros({1}, at::kInt));
    return tokens.back().data_ptr();
  };
  issue("monitored_barrier", rank_, [&] {
    if (rank_ == 0) {
      for (int peer = 1; peer < size_; ++peer) {
        works.push_back(comm().recv(token(), 1, hiercoll::DataType::kInt32, peer, kArriveTag));
      }
    } else {
      works.push_back(comm().send(token(), 1, hiercoll::DataType::kInt32, 0, kArriveTag));
      works.push_back(comm().recv(token(), 1, hiercoll::DataType::kInt32, 0, kReleaseTag));
    }
  });
  submit(c10d::OpType::BARRIER, works, {}, keeping(tokens));

  if (rank_ != 0) {
    for (auto& work : works) {
      if (work.wait_for(deadline.left()) && !work.error()) continue;
      barrier_failed_ = true;
      TORCH_CHECK(false, "Rank ", rank_, " successfully reached monitoredBarrier, but received errors while waiting ",
                  "for send/recv from rank 0. Please check rank 0 logs for faulty rank.\n hiercoll: rank 0 did not ",
                  "release rank ", rank_, " within ", deadline.ms, failure_of(work));
    }
    return;
  }
  const std::string missing = missing_arrivals(works, deadline, wait_all_ranks);
  if (!missing.empty()) {
    barrier_failed_ = true;
    TORCH_CHECK(false, missing);
  }
  std::vector<hiercoll::Work> releases;
  std::vector<at::Tensor> release_tokens;
  issue("monitored_barrier", rank_, [&] {
    for (int peer = 1; peer < size_; ++peer) {
      release_tokens.push_back(at::zeros({1}, at::kInt));
      releases.push_back(
          comm().send(release_tokens.back().data_ptr(), 1, hiercoll::DataType::kInt32, peer, kReleaseTag));
    }
  });
  for (size_t i = 0; i < releases.size(); ++i) {
    if (releases[i].wait_for(deadline.left()) && !releases[i].error()) continue;
    barrier_failed_ = true;
    TORCH_CHECK(false, "[Rank 0]: Rank ", i + 1, " failed to pass monitoredBarrier in ", deadline.ms,
                "\n hiercoll: rank ", i + 1, " did not take its release within ", deadline.ms, failure_of(releases[i]));
  }
}

c10::intrusive_ptr<compat::BackendBase> create_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                       std::chrono::milliseconds timeout, const std::string& name,
                                                       std::vector<uint64_t> global_ranks, bool deferred) {
  return issue("init_process_group", rank, [&] {
    TORCH_CHECK(size >= 1 && rank >= 0 && rank < size, "hiercoll init_process_group: rank ", rank,
                " is outside a group of ", size);
    TORCH_CHECK(global_ranks.empty() || global_ranks.size() == static_cast<size_t>(size),
                "hiercoll init_process_group: ", global_ranks.size(), " global ranks for a group of ", size);
    c10::intrusive_ptr<compat::BackendBase> group =
        c10::make_intrusive<ProcessGroupHiercoll>(store, rank, size, timeout, name, std::move(global_ranks), deferred);
    static std::once_flag said;
    std::call_once(said, [] {
      if (!cuda_tensors_in_place_built() || !hiercoll::Communicator::device_buffers_supported()) {
        hiercoll_log(HIERCOLL_LOG_INFO,
                     cuda_tensors_in_place_built()
                         ? "hiercoll_torch: the hiercoll library has no CUDA device path: CUDA tensors are staged "
                           "through host memory"
                         : "hiercoll_torch: this adapter was built without CUDA: CUDA tensors are staged through host "
                           "memory");
      }
    });
    return group;
  });
}

}  // namespace hiercoll_torch
