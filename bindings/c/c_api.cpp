// The C API: thin wrappers that turn hiercoll::Error into result codes and a per-thread message.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "hiercoll/hiercoll.h"
#include "hiercoll/hiercoll.hpp"

struct hiercoll_comm {
  hiercoll::Communicator comm;
};
struct hiercoll_work {
  hiercoll::Work work;
};
struct hiercoll_bucketer {
  hiercoll::GradientBucketer bucketer;
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
    work.synchronize();
  } else {
    *out = new hiercoll_work{std::move(work)};
  }
}

// A JSON string literal of `text` (the report's paths and messages may hold quotes, backslashes, newlines).
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char escape[8];
      std::snprintf(escape, sizeof escape, "\\u%04x", c);
      out += escape;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + '"';
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
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

hiercoll_result_t hiercoll_comm_on_failure(hiercoll_comm_t comm, hiercoll_failure_fn fn, void* user_data) {
  return guarded([&] {
    hiercoll::Communicator::FailureCallback callback;
    if (fn != nullptr) {
      callback = [fn, user_data](hiercoll::ErrorCode code, const std::string& reason) {
        fn(static_cast<hiercoll_result_t>(code), reason.c_str(), user_data);
      };
    }
    deref(comm).comm.on_failure(std::move(callback));
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
      work->work.synchronize();
    } else {
      work->work.synchronize(std::chrono::milliseconds(timeout_ms));
    }
  });
}

int hiercoll_work_is_completed(hiercoll_work_t work) { return work == nullptr || work->work.is_completed() ? 1 : 0; }

void hiercoll_work_free(hiercoll_work_t work) { delete work; }

hiercoll_result_t hiercoll_bucketer_create(hiercoll_comm_t comm, void* const* data, const size_t* counts,
                                           const hiercoll_datatype_t* types, size_t n, size_t bucket_cap_bytes,
                                           hiercoll_bucketer_t* bucketer) {
  return guarded([&] {
    if (bucketer == nullptr || (n > 0 && (data == nullptr || counts == nullptr || types == nullptr))) {
      throw hiercoll::InvalidUsageError("hiercoll_bucketer_create: NULL argument");
    }
    std::vector<hiercoll::GradientSpec> specs;
    for (size_t i = 0; i < n; ++i) specs.push_back({data[i], counts[i], type_of(types[i])});
    hiercoll::BucketerOptions options;
    if (bucket_cap_bytes > 0) options.bucket_cap_bytes = bucket_cap_bytes;
    *bucketer = new hiercoll_bucketer{hiercoll::GradientBucketer(deref(comm).comm, std::move(specs), options)};
  });
}

hiercoll_result_t hiercoll_bucketer_mark_ready(hiercoll_bucketer_t bucketer, size_t index) {
  return guarded([&] {
    if (bucketer == nullptr) throw hiercoll::InvalidUsageError("bucketer is NULL");
    bucketer->bucketer.mark_ready(index);
  });
}

hiercoll_result_t hiercoll_bucketer_finish(hiercoll_bucketer_t bucketer) {
  return guarded([&] {
    if (bucketer == nullptr) throw hiercoll::InvalidUsageError("bucketer is NULL");
    bucketer->bucketer.finish();
  });
}

void hiercoll_bucketer_free(hiercoll_bucketer_t bucketer) { delete bucketer; }

const char* hiercoll_last_error(void) { return g_last_error.c_str(); }

const char* hiercoll_version(void) { return hiercoll::version(); }

const char* hiercoll_runtime_report(void) {
  thread_local std::string json;
  hiercoll_result_t rc = guarded([&] {
    const hiercoll::RuntimeReport r = hiercoll::runtime_report();
    std::vector<std::string> providers;
    for (const std::string& p : r.providers) providers.push_back(quoted(p));
    json = "{\"version\": " + quoted(r.version) +
           ", \"libfabric\": {\"loaded\": " + (r.libfabric_loaded ? "true" : "false") +
           ", \"path\": " + quoted(r.libfabric_path) + ", \"version\": " + quoted(r.libfabric_version) +
           ", \"providers\": [" + joined(providers) + "], \"error\": " + quoted(r.libfabric_error) + "}" +
           ", \"hwloc\": " + quoted(r.hwloc_version) + ", \"pmix\": " + quoted(r.pmix_version) +
           ", \"device_buffers\": " + (r.device_buffers ? "true" : "false") + "}";
  });
  return rc == HIERCOLL_SUCCESS ? json.c_str() : nullptr;
}

}  // extern "C"
