// The C API: thin wrappers that turn hiercoll::Error into result codes and a per-thread message.
#include <chrono>
#include <string>

#include "hiercoll/hiercoll.h"
#include "hiercoll/hiercoll.hpp"

struct hiercoll_comm {
  hiercoll::Communicator comm;
};
struct hiercoll_work {
  hiercoll::Work work;
};

namespace {

thread_local std::string g_last_error;

template <typename Fn>
hiercoll_result_t guarded(Fn fn) {
  try {
    fn();
    return HIERCOLL_SUCCESS;
  } catch (const hiercoll::Error& e) {
    g_last_error = e.what();
    return static_cast<hiercoll_result_t>(e.code());
  } catch (const std::exception& e) {
    g_last_error = e.what();
    return HIERCOLL_ERROR_INTERNAL;
  }
}

hiercoll_comm& deref(hiercoll_comm_t comm) {
  if (comm == nullptr) throw hiercoll::InvalidUsageError("communicator is NULL");
  return *comm;
}

// Blocks, or hands the Work to the caller.
void finish(hiercoll::Work work, hiercoll_work_t* out) {
  if (out == nullptr) {
    work.wait();
  } else {
    *out = new hiercoll_work{std::move(work)};
  }
}

hiercoll::DataType type_of(hiercoll_datatype_t t) { return static_cast<hiercoll::DataType>(t); }
hiercoll::ReduceOp op_of(hiercoll_redop_t o) { return static_cast<hiercoll::ReduceOp>(o); }

}  // namespace

extern "C" {

hiercoll_result_t hiercoll_comm_init_env(hiercoll_comm_t* comm) {
  return guarded([&] {
    if (comm == nullptr) throw hiercoll::InvalidUsageError("hiercoll_comm_init_env: comm is NULL");
    *comm = new hiercoll_comm{hiercoll::Communicator::from_env()};
  });
}

hiercoll_result_t hiercoll_comm_destroy(hiercoll_comm_t comm) {
  return guarded([&] { delete &deref(comm); });
}

hiercoll_result_t hiercoll_comm_abort(hiercoll_comm_t comm) {
  return guarded([&] {
    deref(comm).comm.abort();
    delete comm;
  });
}

hiercoll_result_t hiercoll_comm_rank(hiercoll_comm_t comm, int* rank) {
  return guarded([&] { *rank = deref(comm).comm.rank(); });
}

hiercoll_result_t hiercoll_comm_size(hiercoll_comm_t comm, int* size) {
  return guarded([&] { *size = deref(comm).comm.size(); });
}

hiercoll_result_t hiercoll_allreduce(hiercoll_comm_t comm, const void* in, void* out, size_t count,
                                     hiercoll_datatype_t type, hiercoll_redop_t op, hiercoll_work_t* work) {
  return guarded([&] { finish(deref(comm).comm.allreduce(in, out, count, type_of(type), op_of(op)), work); });
}

hiercoll_result_t hiercoll_reduce_scatter(hiercoll_comm_t comm, const void* in, void* out, size_t recv_count,
                                          hiercoll_datatype_t type, hiercoll_redop_t op, hiercoll_work_t* work) {
  return guarded([&] { finish(deref(comm).comm.reduce_scatter(in, out, recv_count, type_of(type), op_of(op)), work); });
}

hiercoll_result_t hiercoll_allgather(hiercoll_comm_t comm, const void* in, void* out, size_t send_count,
                                     hiercoll_datatype_t type, hiercoll_work_t* work) {
  return guarded([&] { finish(deref(comm).comm.allgather(in, out, send_count, type_of(type)), work); });
}

hiercoll_result_t hiercoll_broadcast(hiercoll_comm_t comm, const void* in, void* out, size_t count,
                                     hiercoll_datatype_t type, int root, hiercoll_work_t* work) {
  return guarded([&] { finish(deref(comm).comm.broadcast(in, out, count, type_of(type), root), work); });
}

hiercoll_result_t hiercoll_barrier(hiercoll_comm_t comm) {
  return guarded([&] { deref(comm).comm.barrier().wait(); });
}

hiercoll_result_t hiercoll_work_wait(hiercoll_work_t work, int64_t timeout_ms) {
  return guarded([&] {
    if (work == nullptr) throw hiercoll::InvalidUsageError("hiercoll_work_wait: work is NULL");
    if (timeout_ms < 0) {
      work->work.wait();
    } else {
      work->work.wait(std::chrono::milliseconds(timeout_ms));
    }
  });
}

int hiercoll_work_is_completed(hiercoll_work_t work) { return work == nullptr || work->work.is_completed() ? 1 : 0; }

void hiercoll_work_free(hiercoll_work_t work) { delete work; }

const char* hiercoll_last_error(void) { return g_last_error.c_str(); }

}  // extern "C"
