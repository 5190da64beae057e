#include "launch/rendezvous.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>

#include "hiercoll/errors.hpp"

#ifdef HIERCOLL_WITH_PMIX
#include "launch/pmix.hpp"
#endif

namespace hiercoll::launch {

bool pmix_built() {
#ifdef HIERCOLL_WITH_PMIX
  return true;
#else
  return false;
#endif
}

std::string pmix_version() {
#ifdef HIERCOLL_WITH_PMIX
  return pmix_loaded_version();
#else
  return "";
#endif
}

#ifdef HIERCOLL_WITH_PMIX
namespace {

void check_pmix(pmix_status_t rc, const std::string& what) {
  if (rc == PMIX_SUCCESS) return;
  std::string text = what + " failed: " + pmix().error_string(rc);
  if (rc == PMIX_ERR_TIMEOUT) throw TimeoutError("PMIx rendezvous: " + text + " (did every rank of the job start?)");
  throw RemoteError("PMIx rendezvous: " + text);
}

// Initialised once and finalised at exit: PMIx cannot be initialised again in a process once finalised, and Open
// MPI's MPI_Init, which may come after us (the ALBERT trainer's MPI baseline), initialises it too. PMIx counts
// initialisations, so ours keeps the library up until exit, after MPI_Finalize; and the launcher wants every
// process that initialised to finalise (mpirun reports an "improper" exit otherwise).
const pmix_proc_t& pmix_self() {
  static const pmix_proc_t self = [] {
    pmix_proc_t me{};
    check_pmix(pmix().init(&me, nullptr, 0), "PMIx_Init");
    std::atexit([] { pmix().finalize(nullptr, 0); });
    return me;
  }();
  return self;
}

}  // namespace
#endif

std::string pmix_share_from_rank0(const std::string& key, int rank, const std::function<std::string()>& make_value,
                                  std::chrono::milliseconds timeout) {
#ifdef HIERCOLL_WITH_PMIX
  const pmix_proc_t& me = pmix_self();
  if (static_cast<int>(me.rank) != rank) {
    throw InvalidUsageError("PMIx rendezvous: the environment says rank " + std::to_string(rank) + " but PMIx says " +
                            std::to_string(me.rank));
  }
  const std::string pmix_key = "hiercoll." + key;
  const Pmix& lib = pmix();
  // Rank 0's failure to make the value (no address other hosts can reach) is published in its place, so every rank
  // fails at once with its message instead of waiting for the fence's timeout.
  constexpr const char* kFailed = "!failed:";
  std::exception_ptr failure;
  if (rank == 0) {
    std::string value;
    try {
      value = make_value();
    } catch (const std::exception& e) {
      failure = std::current_exception();
      value = std::string(kFailed) + e.what();
    }
    pmix_value_t v{};
    v.type = PMIX_STRING;
    v.data.string = value.data();  // PMIx_Put copies it
    check_pmix(lib.put(PMIX_GLOBAL, pmix_key.c_str(), &v), "PMIx_Put");
    check_pmix(lib.commit(), "PMIx_Commit");
  }
  // The fence makes rank 0's value visible to all; bounded so a rank that never comes cannot hang the others.
  pmix_info_t info[2]{};
  std::strncpy(info[0].key, PMIX_COLLECT_DATA, PMIX_MAX_KEYLEN);
  info[0].value.type = PMIX_BOOL;
  info[0].value.data.flag = true;
  std::strncpy(info[1].key, PMIX_TIMEOUT, PMIX_MAX_KEYLEN);
  info[1].value.type = PMIX_INT;
  info[1].value.data.integer =
      static_cast<int>(std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::seconds>(timeout).count()));
  check_pmix(lib.fence(nullptr, 0, info, 2), "PMIx_Fence");

  pmix_proc_t root{};
  std::memcpy(root.nspace, me.nspace, sizeof root.nspace);
  root.rank = 0;
  pmix_value_t* value = nullptr;
  check_pmix(lib.get(&root, pmix_key.c_str(), nullptr, 0, &value), "PMIx_Get(" + pmix_key + ")");
  // What PMIx_Get returns is the caller's, allocated with malloc: the string inside, then the value.
  std::unique_ptr<pmix_value_t, void (*)(pmix_value_t*)> owned(value, [](pmix_value_t* v) {
    if (v->type == PMIX_STRING) std::free(v->data.string);
    std::free(v);
  });
  if (value->type != PMIX_STRING || value->data.string == nullptr) {
    throw RemoteError("PMIx rendezvous: rank 0's " + pmix_key + " is not a string");
  }
  if (failure) std::rethrow_exception(failure);
  const std::string text = value->data.string;
  if (text.rfind(kFailed, 0) == 0) throw RemoteError("PMIx rendezvous: rank 0 failed: " + text.substr(std::strlen(kFailed)));
  return text;
#else
  (void)key, (void)rank, (void)make_value, (void)timeout;
  throw InvalidUsageError("PMIx rendezvous: hiercoll was built without PMIx (libpmix-dev not found)");
#endif
}

std::optional<std::string> first_host_of(const std::string& list) {
  // The first entry ends at the first comma outside brackets; a bracket holds ranges, of which the first counts.
  size_t end = 0;
  int depth = 0;
  for (; end < list.size(); ++end) {
    if (list[end] == '[') ++depth;
    if (list[end] == ']') --depth;
    if (list[end] == ',' && depth == 0) break;
  }
  std::string first = list.substr(0, end);
  auto open = first.find('[');
  if (open == std::string::npos) return first.empty() ? std::nullopt : std::optional<std::string>(first);
  auto close = first.find(']', open);
  if (close == std::string::npos || close + 1 != first.size() || open == 0) return std::nullopt;
  std::string range = first.substr(open + 1, close - open - 1);
  std::string low = range.substr(0, range.find_first_of(",-"));  // "07-09,12" -> "07" (zero padding kept)
  if (low.empty()) return std::nullopt;
  return first.substr(0, open) + low;
}

}  // namespace hiercoll::launch
